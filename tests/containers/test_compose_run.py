"""docker-compose.yml (with docker-compose.console.yml on top) brought up by a real compose engine:
podman-compose (pinned in tools/podman-compose/requirements.txt) on this machine's podman, in a copy of
the repository where the README's make-secrets line ran. The images compose would build (``build: .``)
are the one built from the checkout; those it would pull are stand-ins built on the same Debian base
from Debian's packages (CI reaches no container registry): PostgreSQL 15 (tests/containers/postgres)
for ``postgres:15``, Prometheus 2.42 (tests/containers/prometheus) for ``prom/prometheus`` and nats-server 2.9
(tests/containers/nats) for ``nats``.

Every service's own healthcheck passes; an approval started through orchestrator-1's published port and
approved through orchestrator-2's commits with exactly one effect in the receiver's database; Prometheus
loads the alert rules without an error and scrapes every target of deploy/prometheus.yml; the relay creates its
JetStream stream on the nats service and publishes every event of the log into it; on ``stop``
every container ends by itself (exit status 0).

Rotating a token as docs/deployment.md#rotating says, on the running stack: a token issued with
``decisionflow token new`` and the reviewer's entry removed (each a new file renamed over the old one, on
the host), then SIGHUP to the containers; both orchestrators refuse the removed token UNAUTHENTICATED and
admit the new one over gRPC, and every worker of the three servers logs the new file's token count.

The audit log: the orchestrators publish its signed checkpoint to the shared volume audit-publish (the file
is there, written by uid 10001, the same in both containers); the audit-monitor service, healthy before the
log's first event (nothing to check yet) and after, keeps the checkpoint the approval's events are signed
into, then accepts a larger one by a consistency proof (its log says ``consistent: checkpoint N extends
checkpoint M``) and keeps it on its own volume.

What the engine here does not do, said by a test that skips with the reason when it applies:
- wait for ``condition: service_healthy``: podman-compose needs podman 4.6 for it and Debian 12 has
  4.3, so the services start in dependency order without waiting; one that comes up before the
  database answers exits and is restarted (``restart: unless-stopped``) until it does;
- run the healthchecks on a timer: podman schedules them with systemd, which CI does not run; the test
  runs each container's healthcheck itself (``podman healthcheck run``) until it passes.
And ``configs:``, which podman-compose 1.6 ignores: the test's override file mounts each file config
read-only at its target, which is what Compose v2 does with one.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from decisionflow_server.runtime.auth import token_sha256
from tests.deploy.made import (
    COMPOSE,
    MadeSecrets,
    environment_without_venv,
    make_secrets_as_documented,
    world_traversable_directory,
)
from tests.support.containers import ULIMITS, Built, machine_lock, podman, record_figure

pytestmark = [pytest.mark.slow, pytest.mark.containers]

ROOT = Path(__file__).resolve().parents[2]
FILES = ("docker-compose.yml", "docker-compose.console.yml")
OVERRIDE = "compose.ci.yml"
# What docs/deployment.md#the-review-console exports before compose up.
CONSOLE = {
    "DECISIONFLOW_CONSOLE_OIDC_ISSUER": "https://id.example.com/realms/support",
    "DECISIONFLOW_CONSOLE_OIDC_CLIENT_ID": "decisionflow-console",
    "DECISIONFLOW_OIDC_AUDIENCE": "decisionflow",
    "DECISIONFLOW_OIDC_ROLE_MAP": "reviewers=reviewer,authors=author,operators=operator",
}
PROMETHEUS = "http://127.0.0.1:9090"
HEALTHY_WITHIN = 180.0
MONITOR = "audit-monitor"
MONITOR_STATE = "/var/lib/decisionflow/audit-monitor/checkpoint"
PUBLISHED = "/var/lib/decisionflow/audit-publish/checkpoint"
# The monitor's --every (30 s) and the orchestrators' audit interval (10 s), with room.
MONITOR_SEES_WITHIN = 90.0
# The first scrape of a target comes within one scrape interval (15 s in deploy/prometheus.yml); a target found
# down (a service restarting until what it needs answers: see the skip below) is scraped again each interval.
SCRAPED_WITHIN = 60.0
PROPOSAL = {
    "case_id": "T-9",
    "action": "record_support_review",
    "body": "Known firmware issue.",
    "evidence": [{"source_id": "HOLD-9", "version": 4, "quotation": "Firmware 4.2.0 may hold."}],
    "policy": {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}},
}


def _top_level(key: str) -> dict[str, dict[str, Any]]:
    """A top-level section (services, configs) of the compose files, merged in their order."""
    merged: dict[str, dict[str, Any]] = {}
    for name in FILES:
        for entry, definition in (yaml.safe_load((ROOT / name).read_text()).get(key) or {}).items():
            merged.setdefault(entry, {}).update(definition)
    return merged


def _override(images: dict[str, Built]) -> dict[str, Any]:
    """The images built here in place of those compose would build or pull (by repository: "build" for
    ``build: .``), and each file config mounted read-only at its target, as Compose v2 mounts it."""
    configs = _top_level("configs")
    services: dict[str, dict[str, Any]] = {}
    for name, service in _top_level("services").items():
        repository = "build" if "build" in service else service["image"].rsplit(":", 1)[0]
        assert repository in images, f"{name}: no image is built here for {repository}"
        services[name] = {"image": images[repository].reference}
        for entry in service.get("configs", []):
            source = entry if isinstance(entry, str) else entry["source"]
            target = f"/{source}" if isinstance(entry, str) else entry.get("target", f"/{source}")
            services[name].setdefault("volumes", []).append(f"{configs[source]['file']}:{target}:ro")
    return {"services": services}


@dataclass(frozen=True)
class Compose:
    """podman-compose on the project's files and the override, in a copy of the repository."""

    executable: str
    project: str
    folder: Path

    def __call__(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run one podman-compose command (with the runtime and limits this machine needs)."""
        files = [argument for name in (*FILES, OVERRIDE) for argument in ("--file", name)]
        # No pod: each service in its own network namespace, as Compose runs them.
        options = ["--project-name", self.project, "--in-pod", "false", "--podman-args", "--runtime runc"]
        options += ["--podman-run-args", " ".join(ULIMITS), *files]
        return subprocess.run(
            [self.executable, *options, *argv],
            cwd=self.folder,
            env=environment_without_venv() | CONSOLE,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def test_what_the_engine_here_does_not_do_is_named(podman_compose: str) -> None:
    waits = [
        f"{name} on {dependency}"
        for name, service in _top_level("services").items()
        if isinstance(service.get("depends_on"), dict)
        for dependency, condition in service["depends_on"].items()
        if condition.get("condition") == "service_healthy"
    ]
    version = podman("version", "--format", "{{.Client.Version}}").stdout.strip()
    missing = []
    if tuple(int(part) for part in version.split(".")[:2]) < (4, 6) and waits:
        missing.append(
            f"podman {version} cannot wait for condition: service_healthy (podman-compose needs 4.6), so "
            f"{len(waits)} such waits ({', '.join(waits[:3])}, ...) are not honoured: services start in order "
            "and restart until what they need answers"
        )
    if not Path("/run/systemd/system").is_dir():
        missing.append("no systemd runs podman's healthcheck timers here: the test runs each healthcheck itself")
    if missing:
        pytest.skip("; ".join(missing))


def _containers(project: str) -> dict[str, str]:
    """The project's containers by service name."""
    listed = podman("ps", "--all", "--filter", f"label=io.podman.compose.project={project}", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    return {c["Labels"]["com.docker.compose.service"]: c["Names"][0] for c in json.loads(listed.stdout or "[]")}


def _until_healthy(containers: dict[str, str], within: float = HEALTHY_WITHIN) -> dict[str, float]:
    """Run each container's own healthcheck (the engine's timer, played here) until it passes; return when."""
    started = time.monotonic()
    healthy: dict[str, float] = {}
    said: dict[str, str] = {}
    while len(healthy) < len(containers) and time.monotonic() - started < within:
        for service, name in containers.items():
            if service not in healthy:
                checked = podman("healthcheck", "run", name, timeout=60)
                if checked.returncode == 0:
                    healthy[service] = time.monotonic() - started
                said[service] = (checked.stdout + checked.stderr).strip()[-300:]
        time.sleep(1)
    unhealthy = {s: said.get(s) for s in containers if s not in healthy}
    logs = {s: podman("logs", "--tail", "20", containers[s]).stderr[-1500:] for s in unhealthy}
    assert not unhealthy, f"not healthy within {within:.0f} s: {unhealthy}\n{logs}"
    return healthy


def _decisionflow(*argv: str) -> subprocess.CompletedProcess[str]:
    client = str(Path(sys.executable).with_name("decisionflow"))
    return subprocess.run(
        [client, *argv], capture_output=True, text=True, timeout=60, check=False, env=environment_without_venv()
    )


def _prometheus(path: str) -> Any:
    with urllib.request.urlopen(f"{PROMETHEUS}{path}", timeout=10) as answer:
        return json.load(answer)["data"]


def _until_scraped() -> tuple[dict[str, str], list[str]]:
    """Every target's health once each is up (or the last seen, SCRAPED_WITHIN on), and a line for each target a
    scrape found down before it came up, with the scrape's error."""
    started = time.monotonic()
    down: dict[str, str] = {}
    while True:
        active = _prometheus("/api/v1/targets")["activeTargets"]
        targets = {t["scrapeUrl"]: t["health"] for t in active}
        down.update({t["scrapeUrl"]: t.get("lastError", "") for t in active if t["health"] == "down"})
        if (targets and set(targets.values()) == {"up"}) or time.monotonic() - started > SCRAPED_WITHIN:
            break
        time.sleep(1)
    if set(targets.values()) != {"up"}:
        errors = {t["scrapeUrl"]: t.get("lastError", "") for t in active if t["health"] != "up"}
        raise AssertionError(f"targets not up after {SCRAPED_WITHIN:.0f} s: {errors}")
    return targets, [f"{url} down at a scrape before it came up ({error})" for url, error in sorted(down.items())]


def test_docker_compose_yml_runs_an_approval_under_podman_compose(
    image: Built,
    postgres_image: Built,
    prometheus_image: Built,
    nats_image: Built,
    podman_compose: str,
    record_property: Any,
) -> None:
    images = {"build": image, "postgres": postgres_image, "prom/prometheus": prometheus_image, "nats": nats_image}
    sizes = {"PostgreSQL": postgres_image, "Prometheus": prometheus_image, "NATS": nats_image}
    figures = ["stand-ins: " + ", ".join(f"{name} {built.size() / 1e6:.0f} MB" for name, built in sizes.items())]
    for directory in world_traversable_directory():
        made = make_secrets_as_documented(directory)
        # What docs/deployment.md#the-review-console asks for first.
        (made.folder / "console-client-secret").write_text("issued-by-the-provider\n")
        (made.clone / OVERRIDE).write_text(yaml.safe_dump(_override(images)))
        compose = Compose(podman_compose, f"dftest{secrets.token_hex(4)}", made.clone)
        with machine_lock("host-ports"):
            try:
                figures += _run(compose, made, directory)
            finally:
                down = compose("down", "--volumes", timeout=600)
                assert down.returncode == 0, down.stderr[-3000:]
    record_figure(record_property, "; ".join(figures))


def _run(compose: Compose, made: MadeSecrets, directory: Path) -> list[str]:
    """Bring every service up, approve through both orchestrators, rotate tokens, check Prometheus, stop; return
    the figures."""
    secrets_folder = made.folder
    clock = time.monotonic()
    up = compose("up", "--detach", "--no-build")
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    containers = _containers(compose.project)
    assert sorted(containers) == sorted(_top_level("services")), sorted(containers)
    # The monitor is healthy with nothing kept yet too: the log has no checkpoint before its first event.
    healthy = _until_healthy(containers)
    figures = [f"up and healthy in {time.monotonic() - clock:.1f} s (slowest: {max(healthy, key=healthy.__getitem__)})"]

    # Started through orchestrator-1's published port, approved through orchestrator-2's.
    proposal = directory / "proposal.json"
    proposal.write_text(json.dumps(PROPOSAL))
    ca = ["--ca-file", str(secrets_folder / "ca.pem")]
    author, reviewer = secrets_folder / "author.token", secrets_folder / "reviewer.token"
    started = _decisionflow("start", str(proposal), "--target", "localhost:50051", *ca, "--token-file", str(author))
    assert started.returncode == 0, started.stderr
    operation_id = json.loads(started.stdout)["operation_id"]
    approved = _decisionflow("approve", operation_id, "--target", "localhost:50052", *ca, "--token-file", str(reviewer))
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["state"] == "COMMITTED", approved.stdout
    query = f"SELECT count(*) FROM effects WHERE operation_id = '{operation_id}'"
    psql = ["psql", "--no-psqlrc", "-U", "postgres", "-d", "receiver", "-Atc", query]
    counted = podman("exec", containers["postgres"], *psql)
    assert counted.returncode == 0 and counted.stdout.strip() == "1", counted

    # The approval's events are signed and published; the monitor keeps the checkpoint (and stays healthy).
    clock = time.monotonic()
    while podman("exec", containers[MONITOR], "test", "-s", MONITOR_STATE).returncode != 0:
        assert time.monotonic() - clock < MONITOR_SEES_WITHIN, podman("logs", containers[MONITOR]).stderr[-1500:]
        time.sleep(1)
    _until_healthy({MONITOR: containers[MONITOR]})
    figures.append(f"audit monitor kept a checkpoint {time.monotonic() - clock:.1f} s after the approval")
    published = {
        name: podman("exec", containers[name], "stat", "--format", "%u:%g %a", PUBLISHED)
        for name in ("orchestrator-1", "orchestrator-2")
    }
    assert {done.returncode for done in published.values()} == {0}, published
    assert {done.stdout.strip() for done in published.values()} == {"10001:10001 644"}, published
    # A second operation grows the log: the monitor's next round proves the larger checkpoint extends its own.
    second = directory / "proposal-2.json"
    second.write_text(json.dumps(PROPOSAL | {"case_id": "T-10"}))
    again = _decisionflow("start", str(second), "--target", "localhost:50052", *ca, "--token-file", str(author))
    assert again.returncode == 0, again.stderr

    # Prometheus: the rules load without an error and every target of deploy/prometheus.yml is scraped.
    groups = _prometheus("/api/v1/rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert rules and not [r["name"] for r in rules if r.get("health") == "err"], rules
    clock = time.monotonic()
    targets, came_up = _until_scraped()
    figures.append(f"{len(rules)} rules, {len(targets)} targets up after {time.monotonic() - clock:.1f} s")
    figures += came_up
    figures += _relay_publishes_every_event(containers)

    figures += _monitor_accepts_a_larger_checkpoint(containers)
    figures += _tokens_rotate_on_sighup(made, containers, secrets_folder / "ca.pem")

    clock = time.monotonic()
    stopped = compose("stop", timeout=600)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    figures.append(f"stopped in {time.monotonic() - clock:.1f} s")
    states = {s: json.loads(podman("inspect", "--format", "{{json .State}}", n).stdout) for s, n in containers.items()}
    ended = {service: state["ExitCode"] for service, state in states.items()}
    assert set(ended.values()) == {0}, f"exit statuses on stop (137: SIGKILL once the stop timeout was over): {ended}"
    return figures


RELAY_STREAM = "DECISIONFLOW_EVENTS"


def _query(expression: str) -> float | None:
    """The one value of an instant Prometheus query, or None when it has none."""
    result = _prometheus(f"/api/v1/query?query={urllib.parse.quote(expression)}")["result"]
    return float(result[0]["value"][1]) if len(result) == 1 else None


def _stream_messages(nats: str) -> int | None:
    """The messages JetStream holds in the relay's stream (its monitoring endpoint, asked in the container)."""
    asked = podman("exec", nats, "wget", "-q", "-O", "-", "http://127.0.0.1:8222/jsz?streams=true")
    if asked.returncode != 0:
        return None
    accounts = json.loads(asked.stdout).get("account_details") or []
    streams = [s for a in accounts for s in a.get("stream_detail") or [] if s["name"] == RELAY_STREAM]
    return int(streams[0]["state"]["messages"]) if streams else None


def _relay_publishes_every_event(containers: dict[str, str]) -> list[str]:
    """The relay created its stream and published every event of the log: the stream holds as many messages as
    the cursor the relay stored (the index of the first event not yet acknowledged), once nothing lags, and
    the broker is up."""
    started = time.monotonic()
    while True:
        cursor = _query("decisionflow_relay_cursor_index")
        lag = _query("decisionflow_relay_lag_events")
        messages = _stream_messages(containers["nats"])
        if cursor and lag == 0 and messages == cursor:
            break
        logs = podman("logs", "--tail", "20", containers["relay"]).stderr[-1500:]
        seen = f"cursor {cursor}, lag {lag}, stream {messages}"
        assert time.monotonic() - started < SCRAPED_WITHIN, f"the relay did not catch up: {seen}\n{logs}"
        time.sleep(2)
    assert _query("decisionflow_relay_broker_up") == 1
    return [f"relay: {messages:.0f} events in {RELAY_STREAM} after {time.monotonic() - started:.1f} s"]


def _monitor_accepts_a_larger_checkpoint(containers: dict[str, str]) -> list[str]:
    """The monitor's log lines once it has accepted a larger checkpoint by its consistency proof; the state it
    kept on its volume is the checkpoint the orchestrators published."""
    started = time.monotonic()
    while True:
        logged = podman("logs", containers[MONITOR])
        lines = [line for line in (logged.stdout + logged.stderr).splitlines() if line.strip()]
        kept = podman("exec", containers[MONITOR], "cat", MONITOR_STATE)
        published = podman("exec", containers["orchestrator-1"], "cat", PUBLISHED)
        caught_up = kept.returncode == 0 and kept.stdout == published.stdout
        if caught_up and any(line.startswith("consistent: checkpoint ") for line in lines):
            break
        assert time.monotonic() - started < MONITOR_SEES_WITHIN, f"the monitor accepted no larger checkpoint: {lines}"
        time.sleep(2)
    assert not [line for line in lines if "FORK" in line], lines
    return [f"monitor log: {line}" for line in lines]


# docs/deployment.md#rotating: the servers that re-read their credentials file on SIGHUP.
RELOADING = ("orchestrator-1", "orchestrator-2", "receiver")
RELOADED = "credentials reloaded from "
RELOADED_WITHIN = 30.0


def _reloads(container: str) -> list[str]:
    """The container's log lines saying its credentials file was read again (one per worker and SIGHUP)."""
    logged = podman("logs", container)
    return [line for line in (logged.stdout + logged.stderr).splitlines() if RELOADED in line]


def _revoke(credentials: Path, token: Path) -> None:
    """Remove token's entry from the credentials file as an editor or ``sed -i`` saves: a new file (same mode
    and group) renamed over the old one."""
    digest = token_sha256(token.read_text().strip())
    document = json.loads(credentials.read_text())
    kept = [entry for entry in document["tokens"] if entry["sha256"] != digest]
    assert len(kept) == len(document["tokens"]) - 1, f"{token.name} is not in {credentials}"
    before = credentials.stat()
    edited = credentials.with_name(f".{credentials.name}.edited")
    edited.write_text(json.dumps(document | {"tokens": kept}, indent=2) + "\n")
    os.chown(edited, -1, before.st_gid)
    edited.chmod(stat.S_IMODE(before.st_mode))
    os.replace(edited, credentials)


def _issue(credentials: Path, principal: str, role: str, into: Path) -> Path:
    """`decisionflow token new` on the host's credentials file, the token kept in into."""
    printed = _decisionflow("token", "new", "--principal", principal, "--role", role, "--file", str(credentials))
    assert printed.returncode == 0, printed.stderr
    into.write_text(printed.stdout)
    return into


def _tokens_rotate_on_sighup(made: MadeSecrets, containers: dict[str, str], ca: Path) -> list[str]:
    """docs/deployment.md#rotating as a person does it: `decisionflow token new` on the host's credentials file,
    the reviewer's entry removed, then SIGHUP (``podman kill --signal HUP``, what ``docker compose kill -s HUP``
    sends). Each server reads the file as it is now: both orchestrators refuse the revoked reviewer's token
    UNAUTHENTICATED and admit the new one, over gRPC through each one's published port; the receiver, given a
    new token, counts the new file's tokens."""
    files = {
        name: Path(made.local(name, COMPOSE["services"][name]["environment"]["DECISIONFLOW_CREDENTIALS_FILE"]))
        for name in RELOADING
    }
    assert files["orchestrator-1"] == files["orchestrator-2"] != files["receiver"], files
    reviewer = made.folder / "reviewer.token"
    rotated = _issue(files["orchestrator-1"], "rita", "reviewer", made.folder / "rita.token")
    _revoke(files["orchestrator-1"], reviewer)
    _issue(files["receiver"], "reconciler-2", "effect_reader", made.folder / "reconciler-2.token")
    tokens = {name: len(json.loads(file.read_text())["tokens"]) for name, file in files.items()}
    before = {name: len(_reloads(containers[name])) for name in RELOADING}
    for name in RELOADING:
        signalled = podman("kill", "--signal", "HUP", containers[name])
        assert signalled.returncode == 0, signalled.stderr
    started = time.monotonic()
    # Each of a service's two workers logs its reload: the parent forwards SIGHUP to them.
    while any(len(_reloads(containers[name])) < before[name] + 2 for name in RELOADING):
        seen = {name: _reloads(containers[name])[before[name] :] for name in RELOADING}
        assert time.monotonic() - started < RELOADED_WITHIN, f"not every worker reloaded: {seen}"
        time.sleep(0.5)
    # What each server read, and what each orchestrator answers the revoked and the new token, over gRPC.
    lines = {name: _reloads(containers[name])[before[name] :] for name in RELOADING}
    read = {
        name: {found[1] for line in lines[name] if (found := re.search(r"\((\d+) tokens", line))} for name in RELOADING
    }
    observed = {f"{name} reads tokens": " ".join(sorted(counts)) for name, counts in read.items()}
    for name, port in (("orchestrator-1", "50051"), ("orchestrator-2", "50052")):
        target = ["--target", f"localhost:{port}", "--ca-file", str(ca)]
        for token in (reviewer, rotated):
            answered = _decisionflow("whoami", *target, "--token-file", str(token))
            if answered.returncode == 0:
                observed[f"{name} {token.name}"] = f"admitted as {json.loads(answered.stdout)['principal']}"
            else:
                refused = "UNAUTHENTICATED" in answered.stderr
                observed[f"{name} {token.name}"] = "UNAUTHENTICATED" if refused else answered.stderr.strip()[-200:]
    expected = {f"{name} reads tokens": str(tokens[name]) for name in RELOADING}
    for name in ("orchestrator-1", "orchestrator-2"):
        expected |= {f"{name} reviewer.token": "UNAUTHENTICATED", f"{name} rita.token": "admitted as rita"}
    assert observed == expected, f"after SIGHUP: {observed}\nlogged: {lines}"
    figures = [f"{name} after SIGHUP: {json.loads(lines[name][-1])['message']}" for name in RELOADING]
    return figures

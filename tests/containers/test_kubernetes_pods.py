"""Every workload of the production overlays, started from the render as a kubelet would start it
(tests/containers/kubelet.py), in the image built from this checkout (tests/support/containers.py).

In a copy of the repository, the secrets are made with docs/kubernetes.md's command line and filled as
the page says (the database URLs, the console's client secret); both steps are rendered by the pinned
kustomize (what ``kubectl apply -k`` applies). Then, on the machine's PostgreSQL (a fresh database per
service for this run, reached through the database host name the made URLs carry): the migration
Jobs run to completion, then the receiver, the orchestrator and the console start and every probe of
theirs answers, a person's StartReview and Approve sent through the orchestrator Service's name (from
a client pod of the namespace) commit with exactly one effect in the receiver's database, the
reconciler's pass succeeds, the audit monitor's check keeps the checkpoint the orchestrator published to
its claim, the relay publishes every event of the log into its JetStream stream of three replicas (on three
nats-server processes standing in for the StatefulSet nats, which a kubelet's part here does not run: each on
its own loopback address at the client port the relay's URLs name, those names resolving to it) and stores
its cursor on its claim, each server runs as uid 10001 with no capability, no new privileges,
seccomp and a read-only root, and each ends on SIGTERM (after its preStop hook) with exit status 0
within its terminationGracePeriodSeconds. The pods share the host's network here, so one replica runs
per workload (see the kubelet's module docstring for what else differs from a cluster).
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.containers.kubelet import Namespace, Pod, Workload, workloads
from tests.deploy.made import documented_make_secrets_line, run_documented_line_in_a_copy, world_traversable_directory
from tests.support.containers import Built, machine_lock, record_figure
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.kubernetes import ROOT, SECRETS, render_production
from tests.support.nats import require_nats_server, stream_messages

pytestmark = [pytest.mark.slow, pytest.mark.containers, pytest.mark.postgres]

DOCS = ROOT / "docs" / "kubernetes.md"
UID = "10001"
# The servers first: the orchestrator calls the receiver, the console the orchestrator.
FIRST = ("receiver", "orchestrator")
PROPOSAL = {
    "case_id": "T-8",
    "action": "record_support_review",
    "body": "Known firmware issue.",
    "evidence": [{"source_id": "HOLD-8", "version": 4, "quotation": "Firmware 4.2.0 may hold."}],
    "policy": {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}},
}


def _fill_secrets_as_documented(secrets: Path, databases: dict[str, str]) -> dict[str, str]:
    """Write each service's database URL (the made host name kept, so the pods resolve it; this run's
    database behind it) and the console's client secret; return the database host's address."""
    hosts = {}
    for service, url in databases.items():
        file = secrets / f"{service}-database.url"
        made, ours = urlsplit(file.read_text().strip()), urlsplit(url)
        assert made.hostname and ours.hostname, (made, ours)
        user = f"{ours.username}:{ours.password}@" if ours.password else f"{ours.username}@"
        file.write_text(urlunsplit((ours.scheme, f"{user}{made.hostname}:{ours.port or 5432}", ours.path, "", "")))
        hosts[made.hostname] = socket.gethostbyname(ours.hostname)
    (secrets / "console-client-secret").write_text("issued-by-the-provider\n")
    return hosts


def _client(services: Namespace, secrets: Path, name: str, argv: list[str], token: str) -> Workload:
    """A pod of the namespace labelled as the orchestrator's client, running one decisionflow command
    with a person's token, hardened as the orchestrator's pod is."""
    orchestrator = workloads(services.objects)["orchestrator"]
    files = {"ca.pem": secrets / "ca.pem", "token": secrets / token}
    services.objects += [
        {
            "kind": "Secret",
            "metadata": {"name": name, "namespace": services.namespace},
            "data": {k: base64.b64encode(v.read_bytes()).decode() for k, v in files.items()},
        },
        {
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": services.namespace},
            "data": {"proposal.json": json.dumps(PROPOSAL)},
        },
    ]
    [service] = [s for s in services.services() if s["metadata"]["name"] == "orchestrator"]
    target = f"orchestrator:{service['spec']['ports'][0]['port']}"
    command = ["decisionflow", *argv, "--target", target, "--ca-file", "/run/secrets/ca.pem"]
    template = {
        "metadata": {"labels": {"decisionflow.io/client": "true"}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": orchestrator.spec["securityContext"],
            "containers": [
                {
                    "name": "client",
                    "command": [*command, "--token-file", "/run/secrets/token"],
                    "securityContext": orchestrator.container["securityContext"],
                    "resources": orchestrator.container["resources"],
                    "volumeMounts": [
                        {"name": "secrets", "mountPath": "/run/secrets", "readOnly": True},
                        {"name": "proposal", "mountPath": "/etc/proposal", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "secrets", "secret": {"secretName": name, "defaultMode": 0o440}},
                {"name": "proposal", "configMap": {"name": name, "defaultMode": 0o444}},
            ],
        },
    }
    return Workload(name, "Job", template)


def _ready(pod: Pod) -> list[str]:
    """Run the pod's probes in a kubelet's order; return what each said."""
    said = []
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in pod.workload.container:
            probed = pod.probe(kind)
            assert probed.passed, f"{pod.workload.name}'s {kind} failed after {probed.attempts}: {probed.said}"
            said.append(f"{kind} after {probed.attempts}")
    return said


def _hardened(pod: Pod) -> None:
    """The pod's main process runs as uid and gid 10001 with no capability, no new privileges and seccomp,
    and its root cannot be written."""
    status = pod.status()
    name = pod.workload.name
    assert status["Uid"].split() == [UID] * 4 and status["Gid"].split() == [UID] * 4, (name, status)
    assert UID in status["Groups"].split(), (name, status["Groups"])
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capabilities], 16) == 0, (name, capabilities, status[capabilities])
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", (name, status)
    for path in ("/opt/decisionflow/written", "/tmp/written"):
        written = pod.exec(["touch", path])
        assert written.returncode != 0 and "Read-only file system" in written.stderr, (name, path, written)


def _audit_monitor_keeps_what_the_orchestrator_published(services: Namespace, cronjob: Workload) -> str:
    """The audit monitor's CronJob, one Job after another (each succeeds with nothing to check while the
    approval's checkpoint is not yet signed and published, or fails while the orchestrator does not answer yet)
    until a check keeps the checkpoint the orchestrator wrote to its claim, as uid 10001."""
    started = time.monotonic()
    for attempt in range(30):
        checked = services.complete(Workload(f"audit-monitor-{attempt}", "Job", cronjob.template))
        if checked.returncode == 0 and "no checkpoint is published yet" not in checked.stderr:
            break
        waiting = "no checkpoint is published yet" if checked.returncode == 0 else "cannot fetch the checkpoint"
        assert checked.returncode in {0, 1} and waiting in checked.stderr, checked.stderr
        time.sleep(1)
    assert checked.returncode == 0 and "the first one seen" in checked.stderr, checked.stderr
    claims = services.root / "claims"
    published = claims / "audit-publish" / "checkpoint"
    assert f"{published.stat().st_uid}" == UID, published.stat()
    assert (claims / "audit-monitor" / "checkpoint").read_text() == published.read_text()
    return (
        f"audit monitor kept the published checkpoint after {attempt + 1} check(s), {time.monotonic() - started:.1f} s"
    )


RELAY_STREAM = "DECISIONFLOW_EVENTS"
RELAY_WITHIN = 90.0


@dataclass
class _Nats:
    """nats-server processes for the relay's URLs: each server named in them on a loopback address of its own
    (127.0.0.2, 127.0.0.3, ...) at the port the URL names, clustered by route, JetStream on."""

    hosts: dict[str, str]
    servers: str
    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]

    @classmethod
    def start(cls, relay: Workload, directory: Path) -> _Nats:
        require_nats_server()
        env = {e["name"]: e.get("value", "") for e in relay.container["env"]}
        named = [urlsplit(url) for url in env["DECISIONFLOW_RELAY_NATS_URL"].split(",")]
        addresses = [f"127.0.0.{2 + i}" for i in range(len(named))]
        routes = [(address, _free_port(address)) for address in addresses]
        directory.mkdir()
        nats = cls({str(u.hostname): a for u, a in zip(named, addresses, strict=True)}, "", [], [])
        nats.servers = ",".join(f"nats://{a}:{u.port}" for u, a in zip(named, addresses, strict=True))
        health: list[str] = []
        try:
            for i, (url, address) in enumerate(zip(named, addresses, strict=True)):
                others = ", ".join(f'"nats-route://{a}:{p}"' for a, p in routes if a != address)
                config = directory / f"nats-{i}.conf"
                http = _free_port(address)
                config.write_text(
                    f"server_name: nats-{i}\nlisten: {address}:{url.port}\nhttp: {address}:{http}\n"
                    f'jetstream {{ store_dir: "{directory / f"store-{i}"}" }}\n'
                    f"cluster {{ name: relay, listen: {address}:{routes[i][1]}, routes: [{others}] }}\n"
                )
                log = directory / f"nats-{i}.log"
                with log.open("wb") as out:
                    process = subprocess.Popen(
                        [require_nats_server(), "-c", str(config)], stdout=out, stderr=subprocess.STDOUT
                    )
                nats.processes.append(process)
                nats.logs.append(log)
                health.append(f"http://{address}:{http}/healthz")
            # Healthy once JetStream has a meta leader: after every server started.
            for url, process, log in zip(health, nats.processes, nats.logs, strict=True):
                _until_healthy(url, process, log)
        except BaseException:
            nats.stop()
            raise
        return nats

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _until_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        assert process.poll() is None and time.monotonic() - started < 60, log.read_text()[-2000:]
        time.sleep(0.2)


def _relay_publishes_the_log(services: Namespace, nats: _Nats) -> str:
    """The relay pod stored on its claim a cursor past every event of the log, and its stream (three replicas)
    holds as many messages."""
    cursor = services.root / "claims" / "relay-cursor" / "cursor"
    started = time.monotonic()
    while True:
        stored = int(cursor.read_text().strip() or 0) if cursor.exists() else 0
        messages = stream_messages(nats.servers, RELAY_STREAM) if stored else None
        if stored and messages == stored:
            break
        assert time.monotonic() - started < RELAY_WITHIN, f"the relay's cursor {stored}, its stream {messages}"
        time.sleep(1)
    assert f"{cursor.stat().st_uid}" == UID, cursor.stat()
    return f"relay: {stored} events in {RELAY_STREAM} (3 replicas), {time.monotonic() - started:.1f} s"


def _effects(url: str, operation_id: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM effects WHERE operation_id = %s", (operation_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_every_workload_runs_from_the_rendered_manifests_as_a_kubelet_would(
    image: Built, kustomize: str, record_property: Any
) -> None:
    started = time.monotonic()
    databases = {service: create_postgres_database() for service in FIRST}
    figures: list[str] = []
    namespaces: list[Namespace] = []
    for directory in world_traversable_directory():
        try:
            clone = run_documented_line_in_a_copy(directory, documented_make_secrets_line(DOCS))
            secrets = clone / SECRETS.relative_to(ROOT)
            hosts = _fill_secrets_as_documented(secrets, databases)
            rendered = render_production(kustomize, clone)
            prefix = f"dftest-{directory.name.rsplit('-', 1)[-1].lower()}"
            pods_root = directory / "pods"
            # Step 1 (common) holds the namespace and the Secrets the migration Jobs mount: applied first,
            # its objects are in the namespace both later steps run in.
            migrate = Namespace(
                [*rendered.common, *rendered.migrate], image.reference, pods_root / "migrate", prefix, hosts
            )
            services = Namespace(
                [*rendered.common, *rendered.services], image.reference, pods_root / "services", prefix, hosts
            )
            namespaces += [migrate, services]
            services.check_services_keep_their_ports()
            with machine_lock("host-ports"):
                nats = _Nats.start(workloads(services.objects)["relay"], directory / "nats")
                try:
                    services.extra_hosts.update(nats.hosts)
                    _run_the_topology(migrate, services, secrets, databases, figures, nats)
                finally:
                    nats.stop()
        finally:
            for namespace in namespaces:
                namespace.remove_all()
            for url in databases.values():
                drop_postgres_database(url)
    figures.append(f"whole run {time.monotonic() - started:.1f} s")
    record_figure(record_property, "; ".join(figures))


def _run_the_topology(
    migrate: Namespace, services: Namespace, secrets: Path, databases: dict[str, str], figures: list[str], nats: _Nats
) -> None:
    # Step 2 of 3 (after step 1's Secrets): the migration Jobs, each to completion.
    jobs = workloads(migrate.objects)
    assert {w.kind for w in jobs.values()} == {"Job"} and len(jobs) == 2, sorted(jobs)
    for job in jobs.values():
        clock = time.monotonic()
        done = migrate.complete(job)
        assert done.returncode == 0, f"{job.name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        figures.append(f"{job.name} {time.monotonic() - clock:.1f} s")

    # Step 3 of 3: the servers, each ready before the next starts, then the rest.
    deployments = {n: w for n, w in workloads(services.objects).items() if w.kind == "Deployment"}
    assert set(FIRST) <= set(deployments), sorted(deployments)
    pods: dict[str, Pod] = {}
    for name in [*FIRST, *sorted(set(deployments) - set(FIRST))]:
        clock = time.monotonic()
        pods[name] = services.start(deployments[name])
        said = _ready(pods[name])
        figures.append(f"{name} ready in {time.monotonic() - clock:.1f} s ({', '.join(said)})")

    # A person's StartReview and Approve through the orchestrator Service's name.
    clock = time.monotonic()
    start = services.complete(
        _client(services, secrets, "client-start", ["start", "/etc/proposal/proposal.json"], "author.token")
    )
    assert start.returncode == 0, start.stdout + start.stderr
    operation_id = json.loads(start.stdout)["operation_id"]
    approve = services.complete(
        _client(services, secrets, "client-approve", ["approve", operation_id], "reviewer.token")
    )
    assert approve.returncode == 0, approve.stdout + approve.stderr
    assert json.loads(approve.stdout)["state"] == "COMMITTED", approve.stdout
    assert _effects(databases["receiver"], operation_id) == 1
    figures.append(f"StartReview + Approve {time.monotonic() - clock:.1f} s")

    # The reconciler's CronJob: one pass, to completion, with nothing left unknown.
    cronjobs = {n: w for n, w in workloads(services.objects).items() if w.kind == "CronJob"}
    assert set(cronjobs) == {"reconciler", "audit-monitor"}, sorted(cronjobs)
    passed = services.complete(cronjobs["reconciler"])
    assert passed.returncode == 0, passed.stdout + passed.stderr
    summary = json.loads(passed.stdout.splitlines()[-1])
    assert summary["completed"] is True and summary["still_unknown"] == summary["lookup_failures"] == 0, summary

    figures.append(_audit_monitor_keeps_what_the_orchestrator_published(services, cronjobs["audit-monitor"]))
    figures.append(_relay_publishes_the_log(services, nats))

    for pod in pods.values():
        assert pod.running(), f"{pod.workload.name} ended:\n{pod.logs()}"
        _hardened(pod)

    # SIGTERM: each pod at once, as a node drain does; each ends by itself within its grace period.
    with ThreadPoolExecutor(len(pods)) as pool:
        ended = dict(zip(pods, pool.map(Pod.terminate, pods.values()), strict=True))
    for name, how in ended.items():
        grace = pods[name].workload.grace
        # SIGKILL (exit 137) would have come only once the grace period was over.
        assert not how.killed and how.exit_code == 0, f"{name} ({grace:.0f} s grace): {how}\n{pods[name].logs()}"
    figures.append("stopped in " + ", ".join(f"{n} {h.seconds:.1f} s" for n, h in ended.items()))

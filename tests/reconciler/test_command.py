"""The decisionflow-reconciler command: exit status, human and --json output, bearer tokens, the
--interval loop with its metrics and SIGTERM, and several reconcilers at once.

Servers are real (in process via make_stack, or processes); the command always runs as its own
process. Open operations here are seeded (see tests/support/seeding.py): orchestrator rows
written with the orchestrator's tables and, for the "applied" ones, the matching effect written
with the receiver's tables, exactly as a committed Apply whose reply was lost leaves them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from decisionflow_server.foundation.processes import child_environment as command_env
from decisionflow_server.foundation.processes import free_port
from decisionflow_server.runtime.auth import Role, issue_token
from decisionflow_server.storage import db
from reconciler.config import load
from reconciler.main import main
from tests.support.logs import read_log
from tests.support.reconciling import (
    ROOT,
    closed_port,
    count,
    reconciler_command,
    run_reconciler,
)
from tests.support.seeding import seed_effects, seed_operations
from tests.support.servers import spawn
from tests.support.stack import CHECKPOINT_KEY, Stack

SUMMARY_FIELDS = {
    "examined",
    "settled",
    "already_settled",
    "redriven",
    "redrive_outcomes",
    "noted",
    "escalated",
    "lookup_failures",
    "still_unknown",
    "oldest_unknown_age_seconds",
    "unknown_older_than_alert",
    "alert_after_seconds",
    "duration_seconds",
    "completed",
}


def targets(stack: Stack, receiver_port: int | None = None) -> list[str]:
    """Flags aiming the command at the stack."""
    return [
        "--orchestrator-target",
        f"127.0.0.1:{stack.orchestrator_port}",
        "--receiver-target",
        f"127.0.0.1:{receiver_port or stack.receiver_port}",
    ]


def recorded_receipts(url: str) -> dict[str, str]:
    """Receipt ids recorded by the orchestrator, by operation id."""
    engine = db.create_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT operation_id, receipt_id FROM operations")).all()
    finally:
        engine.dispose()
    return {row.operation_id: row.receipt_id for row in rows}


def open_count(url: str) -> int:
    """Operations still APPROVED or UNKNOWN in the orchestrator database."""
    return count(url, "SELECT count(*) FROM operations WHERE state IN ('approved', 'unknown')")


@pytest.mark.slow
def test_exit_status_follows_what_is_left_unconfirmed(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    seeded = seed_operations(stack.orchestrator_url, 3)  # decided a minute ago
    seed_effects(stack.receiver_url, seeded)
    down = targets(stack, receiver_port=closed_port())

    # Receiver down for the whole pass, nothing older than the threshold: noted, exit 0.
    calm = run_reconciler(["--once", "--json", *down, "--alert-after-seconds", "3600"])
    assert calm.returncode == 0, calm.stderr
    assert set(calm.summary) == SUMMARY_FIELDS
    assert (calm.summary["lookup_failures"], calm.summary["still_unknown"], calm.summary["settled"]) == (3, 3, 0)
    assert calm.summary["unknown_older_than_alert"] == 0
    assert calm.summary["oldest_unknown_age_seconds"] >= 60

    # Same, with a threshold the operations are older than: exit 1, so a cron job alerts.
    alarm = run_reconciler(["--once", "--json", *down, "--alert-after-seconds", "30"])
    assert alarm.returncode == 1, alarm.stderr
    assert alarm.summary["unknown_older_than_alert"] == 3
    assert open_count(stack.orchestrator_url) == 3

    # Receiver back: everything settles, human summary, exit 0.
    healed = run_reconciler(["--once", *targets(stack), "--alert-after-seconds", "30"])
    assert healed.returncode == 0, healed.stderr
    assert "settled:       3 committed by lookup" in healed.stdout
    assert "re-driven:     0" in healed.stdout
    assert "still unknown: 0 (oldest -" in healed.stdout
    assert "escalated:     0" in healed.stdout
    assert open_count(stack.orchestrator_url) == 0


def _log_lines(stderr: str) -> list[dict[str, Any]]:
    """Every stderr line as a JSON log line (the human summary is on stdout); one that is not fails."""
    log = read_log(stderr)
    log.assert_json_only()
    return log.records


@pytest.mark.slow
def test_exit_2_when_the_orchestrator_cannot_be_reached() -> None:
    unreachable = ["--orchestrator-target", f"127.0.0.1:{closed_port()}", "--receiver-target", "127.0.0.1:1"]
    down = run_reconciler(["--once", *unreachable, "--timeout-seconds", "1"])
    assert down.returncode == 2
    assert "could not run" in down.stderr and "UNAVAILABLE" in down.stderr
    (line,) = [e for e in _log_lines(down.stderr) if str(e["message"]).startswith("could not run")]
    assert (line["level"], line["code"], line["service"]) == ("error", "UNAVAILABLE", "reconciler")


@pytest.mark.parametrize(
    "argv",
    [
        ["--once", "--batch-size", "5000"],
        ["--once", "--batch-size", "0"],
        ["--once", "--grace-seconds", "soon"],
        ["--once", "--alert-after-seconds", "-1"],
        ["--once", "--interval", "5"],
        ["--interval", "0"],
        [],
        ["--once", "--orchestrator-token-file", "/nonexistent/reconciler.token"],
        ["--once", "--receiver-token-file", "/nonexistent/reconciler.token"],
        ["--once", "--ca-file", "/nonexistent/ca.pem"],
        ["--once", "--log-level", "chatty"],
    ],
)
def test_exit_2_on_bad_configuration(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "decisionflow-reconciler: error:" in capsys.readouterr().err


def test_configuration_comes_from_flags_then_environment_then_defaults(tmp_path: Path) -> None:
    operator, reader = tmp_path / "operator.token", tmp_path / "reader.token"
    operator.write_text("operator-token\n")
    reader.write_text("reader-token\n")
    environ = {
        "DECISIONFLOW_ORCHESTRATOR_TARGET": "orchestrator:50051",
        "DECISIONFLOW_RECONCILER_ORCHESTRATOR_TOKEN_FILE": str(operator),
        "DECISIONFLOW_RECONCILER_RECEIVER_TOKEN_FILE": str(reader),
        "DECISIONFLOW_RECONCILER_BATCH_SIZE": "1000",
        "DECISIONFLOW_RECONCILER_METRICS_PORT": "9102",
    }
    config = load(["--interval", "30", "--batch-size", "250", "--no-redrive"], environ)
    assert (config.once, config.interval_seconds, config.no_redrive, config.json) == (False, 30.0, True, False)
    assert (config.orchestrator_target, config.receiver_target) == ("orchestrator:50051", "127.0.0.1:50061")
    assert (config.orchestrator_token, config.receiver_token) == ("operator-token", "reader-token")
    assert (config.batch_size, config.metrics_port) == (250, 9102)
    assert (config.grace_seconds, config.alert_after_seconds, config.timeout_seconds) == (30.0, 300.0, 10.0)


@pytest.mark.slow
def test_each_service_is_presented_only_its_own_token(tmp_path: Path) -> None:
    # Each service's credentials list only the tokens that call it, so a token sent to the wrong
    # service is refused there: the pass works only if each service sees its own token.
    receiver_credentials = tmp_path / "receiver-credentials.json"
    orchestrator_credentials = tmp_path / "orchestrator-credentials.json"
    tokens = {
        "orchestrator": issue_token(receiver_credentials, "orchestrator", [Role.EFFECT_WRITER]),
        "reader": issue_token(receiver_credentials, "reconciler", [Role.EFFECT_READER]),
        "operator": issue_token(orchestrator_credentials, "reconciler", [Role.OPERATOR]),
    }
    for name, token in tokens.items():
        (tmp_path / f"{name}.token").write_text(token + "\n")
    assert tokens["operator"] not in receiver_credentials.read_text()
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    applied = seed_operations(orchestrator_url, 2)
    seed_effects(receiver_url, applied)
    seed_operations(orchestrator_url, 1)  # attempted, never applied: the re-drive needs the writer token
    receiver = spawn(
        "effect_receiver.main",
        ["--address", "127.0.0.1:0", "--database-url", receiver_url],
        tmp_path,
        "receiver",
        env={"DECISIONFLOW_CREDENTIALS_FILE": str(receiver_credentials)},
    )
    orchestrator = spawn(
        "orchestrator.main",
        ["--address", "127.0.0.1:0", "--database-url", orchestrator_url, "--receiver-target", receiver.target],
        tmp_path,
        "orchestrator",
        env={
            "DECISIONFLOW_CREDENTIALS_FILE": str(orchestrator_credentials),
            "DECISIONFLOW_CHECKPOINT_KEYS": CHECKPOINT_KEY,
            "DECISIONFLOW_RECEIVER_TOKEN_FILE": str(tmp_path / "orchestrator.token"),
        },
    )
    try:
        aim = ["--once", "--json", "--orchestrator-target", orchestrator.target, "--receiver-target", receiver.target]
        anonymous = run_reconciler(aim)
        assert anonymous.returncode == 2 and "UNAUTHENTICATED" in anonymous.stderr
        # The operator's token is not one the receiver accepts: every lookup there is refused.
        one_token = ["--orchestrator-token-file", str(tmp_path / "operator.token")]
        refused = run_reconciler([*aim, *one_token, "--receiver-token-file", str(tmp_path / "operator.token")])
        assert refused.summary["lookup_failures"] == 3 and refused.summary["settled"] == 0, refused.stderr
        assert open_count(orchestrator_url) == 3

        run = run_reconciler(
            aim,
            env={
                "DECISIONFLOW_RECONCILER_ORCHESTRATOR_TOKEN_FILE": str(tmp_path / "operator.token"),
                "DECISIONFLOW_RECONCILER_RECEIVER_TOKEN_FILE": str(tmp_path / "reader.token"),
            },
        )
        assert run.returncode == 0, run.stderr
        assert (run.summary["settled"], run.summary["redrive_outcomes"]["committed"]) == (2, 1)
        assert open_count(orchestrator_url) == 0
        assert count(receiver_url, "SELECT count(*) FROM effects") == 3
    finally:
        orchestrator.stop()
        receiver.stop()


@pytest.mark.parametrize("source", ["flag", "environment"])
def test_the_retired_token_file_is_refused_naming_the_two_flags(
    tmp_path: Path, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "reconciler.token"
    token.write_text("one-token-for-both\n")
    argv, environ = ["--once"], dict[str, str]()
    if source == "flag":
        argv += ["--token-file", str(token)]
    else:
        environ["DECISIONFLOW_RECONCILER_TOKEN_FILE"] = str(token)
    with pytest.raises(SystemExit) as exited:
        load(argv, environ)
    assert exited.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("decisionflow-reconciler: error: --token-file (env DECISIONFLOW_RECONCILER_TOKEN_FILE)")
    assert "--orchestrator-token-file (role operator)" in line and "--receiver-token-file (role effect_reader)" in line


@pytest.mark.slow
def test_interval_mode_serves_metrics_and_stops_on_sigterm(make_stack: Callable[..., Stack], tmp_path: Path) -> None:
    stack = make_stack()
    seeded = seed_operations(stack.orchestrator_url, 4)
    seed_effects(stack.receiver_url, seeded[:3])  # the fourth is re-driven
    port = free_port()
    stderr_path = tmp_path / "reconciler.stderr"
    with (
        stderr_path.open("w") as stderr,
        subprocess.Popen(
            reconciler_command(["--interval", "0.2", "--json", "--grace-seconds", "0", *targets(stack)]),
            cwd=ROOT,
            env=command_env({"DECISIONFLOW_RECONCILER_METRICS_PORT": str(port)}),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        ) as process,
    ):
        try:
            assert process.stdout is not None
            first = process.stdout.readline()  # one JSON line per pass
            assert '"settled": 3' in first and '"committed": 1' in first
            body = ""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    body = response.read().decode()
                if "decisionflow_reconciler_unknown 0.0" in body:
                    break
                time.sleep(0.1)
            assert "decisionflow_reconciler_settled_total 3.0" in body
            assert 'decisionflow_reconciler_redriven_total{outcome="committed"} 1.0' in body
            assert "decisionflow_reconciler_unknown 0.0" in body
            assert "decisionflow_reconciler_oldest_unknown_age_seconds 0.0" in body
            assert "decisionflow_reconciler_lookup_latency_seconds_count" in body
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == 0
        finally:
            if process.poll() is None:
                process.kill()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    assert "metrics on http://127.0.0.1:" in stderr_path.read_text()
    assert [e["port"] for e in _log_lines(stderr_path.read_text()) if str(e["message"]).startswith("metrics on")] == [
        port
    ]


@pytest.mark.slow
def test_two_reconcilers_at_once_settle_everything_once(make_stack: Callable[..., Stack], database_url: str) -> None:
    stack = make_stack(orchestrator_url=database_url)
    applied = seed_operations(stack.orchestrator_url, 400)
    receipts = seed_effects(stack.receiver_url, applied)
    seed_operations(stack.orchestrator_url, 100)  # attempted, never applied: both may re-drive them
    argv = reconciler_command(["--once", "--json", "--batch-size", "100", *targets(stack)])
    runs = [
        subprocess.Popen(argv, cwd=ROOT, env=command_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    for run, (_, stderr) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, stderr
    summaries = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
    assert all(s["redrive_outcomes"]["failed"] == 0 and s["still_unknown"] == 0 for s in summaries)
    # A lookup moves an operation to COMMITTED once, whichever reconciler records it first.
    assert sum(s["settled"] for s in summaries) <= 500
    assert open_count(stack.orchestrator_url) == 0
    assert count(stack.orchestrator_url, "SELECT count(*) FROM operations WHERE state = 'committed'") == 500
    assert stack.effects() == 500
    # The receipt recorded for each applied operation is the one the receiver wrote.
    assert {op: receipt for op, receipt in recorded_receipts(stack.orchestrator_url).items() if op in receipts} == (
        receipts
    )


@pytest.mark.slow
def test_interval_mode_outlives_an_unreachable_orchestrator(tmp_path: Path) -> None:
    stderr_path = tmp_path / "reconciler.stderr"
    unreachable = ["--orchestrator-target", f"127.0.0.1:{closed_port()}", "--receiver-target", "127.0.0.1:1"]
    with (
        stderr_path.open("w") as stderr,
        subprocess.Popen(
            reconciler_command(["--interval", "0.1", "--timeout-seconds", "1", *unreachable]),
            cwd=ROOT,
            env=command_env(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        ) as process,
    ):
        try:
            deadline = time.monotonic() + 30
            while stderr_path.read_text().count("pass failed") < 2 and time.monotonic() < deadline:
                assert process.poll() is None, stderr_path.read_text()
                time.sleep(0.1)
            assert stderr_path.read_text().count("pass failed") >= 2
            failed = [e for e in _log_lines(stderr_path.read_text()) if str(e["message"]).startswith("pass failed")]
            assert {(e["level"], e["code"]) for e in failed} == {("warning", "UNAVAILABLE")}
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == 0
        finally:
            if process.poll() is None:
                process.kill()

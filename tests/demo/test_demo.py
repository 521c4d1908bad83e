"""``decisionflow demo`` end to end as a separate process: its verdict, its transcript, and its cleanup."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from decisionflow_demo.waiting import nats_server_binary
from tests.support.logs import read_log_file
from tests.support.nats import nats_required

pytestmark = pytest.mark.slow

EXPECTED = {
    "ok": True,
    "effects_for_case": 1,
    "replay": True,
    "conflict_refused": True,
    "stale_refused": True,
    "omitted_refused": True,
    "unknown_before_reconcile": True,
    "reemitted_from_checkpoint": True,
    "committed_after_reconcile": True,
    "control_effects": 2,
    "audit_verified": True,
    "quorum_case_id": "T-1044",
    "earlier_rule_kept": True,
    "not_eligible_refused": True,
    "quorum_two_of_three": True,
    "waiting_case_id": "T-1045",
    "waiter_kept_waiting": True,
    "waiter_saw_outcome": True,
    "failed": [],
    "error": None,
}


def _demo(*args: str) -> list[str]:
    return [sys.executable, "-m", "decisionflow_cli", "demo", *args]


def _environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("DECISIONFLOW_")}


def _verdict(stdout: str) -> dict[str, Any]:
    last = stdout.strip().splitlines()[-1]
    verdict = json.loads(last)
    assert isinstance(verdict, dict)
    return verdict


def _pids(transcript: str) -> set[int]:
    return {int(pid) for pid in re.findall(r"\bpid (\d+)", transcript)}


def _assert_all_stopped(pids: set[int]) -> None:
    assert pids, "the transcript names no child process"
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _processes_using(state_dir: Path) -> list[str]:
    """Command lines of live processes that name state_dir (every child of the demo does)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(state_dir.resolve()) in text and " demo " not in text:
            found.append(text)
    return found


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=timeout, env=_environment())


def _assert_story(done: subprocess.CompletedProcess[str], state_dir: Path) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = _verdict(done.stdout)
    assert {key: verdict[key] for key in EXPECTED} == EXPECTED
    assert verdict["operation_id"].startswith("op-v1-")
    assert verdict["checkpoints"] > 0
    assert verdict["state_dir"] == str(state_dir.resolve())
    # About 15 s on an idle 2-core machine: reported, not bounded (that is the machine's pace).
    assert verdict["seconds"] > 0
    transcript = done.stdout
    for number in range(1, 9):
        assert re.search(rf"^{number}\. ", transcript, re.MULTILINE)
    assert "review request re-emitted from checkpoint" in transcript
    assert "outcome UNKNOWN, exit 42" in transcript
    assert "STALE_PROPOSAL" in transcript and "DECISION_CONFLICT" in transcript
    # Step 6: T-1042's three leaves verified against a signed checkpoint, and a copy naming another reviewer refused.
    assert re.search(r"-> verified, exit 0: checkpoint \d+ of decisionflow.local/audit .*; 3 leaves proven", transcript)
    assert "leaf 1: decision APPROVE by rita" in transcript
    assert "-> refused, exit 1: leaf 1: " in transcript
    # The checkpoint is published outside the database and kept by the monitor.
    monitored = r"-> exit 0: kept checkpoint (\d+) of decisionflow.local/audit in audit-monitor.checkpoint: the first"
    kept = re.search(monitored, transcript)
    assert kept is not None, transcript
    published = (state_dir / "audit-published" / "checkpoint").read_text()
    assert (state_dir / "audit-monitor.checkpoint").read_text() == published
    assert published.splitlines()[1] == kept.group(1)
    bundle = json.loads((state_dir / "T-1042.audit.json").read_text())
    assert len(bundle["leaves"]) == 3
    _assert_quorum_step(transcript)
    _assert_waiting_step(transcript, verdict)
    _assert_all_stopped(_pids(transcript))
    return verdict


def _assert_waiting_step(transcript: str, verdict: dict[str, Any]) -> None:
    """Step 8: the waiting service (and, with nats-server, a JetStream consumer fed by the relay) kept waiting
    through the first lead's vote and printed the outcome once settled."""
    step = transcript[transcript.index("\n8. ") :]
    assert re.search(r"-> the waiting service printed 'operation op-v1-[0-9a-f]{64}: COMMITTED, receipt rcpt-", step)
    if nats_server_binary() is None and not nats_required():
        assert verdict["jetstream"] == "nats-server is not installed (Debian package nats-server)"
        assert "-> still waiting: 1 of 1" in step
        return
    assert (verdict["jetstream"], verdict["consumer_saw_outcome"]) == ("ran", True)
    assert "-> still waiting: 2 of 2" in step
    assert re.search(
        r"-> the JetStream consumer printed 'dev.decisionflow.effect of op-v1-[0-9a-f]{12}…, state COMMITTED, "
        r"Nats-Msg-Id decisionflow.local/audit/\d+' and exited 0",
        step,
    )


def _assert_quorum_step(transcript: str) -> None:
    """Step 7: the rule reloaded on SIGHUP, the earlier review decided by one approval, T-1044 by two leads."""
    step = transcript[transcript.index("\n7. ") :]
    assert re.search(r"\$ kill -HUP \d+   \(orchestrator B\)\n   -> orchestrator B logs: review rules reloaded", step)
    assert "-> outcome COMMITTED, exit 0: T-1043 began before the rule" in step
    assert "effects for T-1043: 1" in step
    expected = [
        "as lena (group leads)",
        "-> outcome AWAITING_APPROVALS: waiting for 1 more (1 of 2 approvals, by lena); effects for T-1044: 0",
        "as rita (no group)",
        "-> PERMISSION_DENIED (NOT_ELIGIBLE_TO_DECIDE, not_eligible): rita holds no group of the stage; "
        "votes recorded: 1, effects for T-1044: 0",
        "as liam (group leads)",
        "-> outcome COMMITTED, decided by liam; effects for T-1044: 1",
    ]
    lines = [line.strip() for line in step.splitlines()]
    votes = lines[next(i for i, line in enumerate(lines) if line.endswith(expected[0])) :][:6]
    assert len(votes) == len(expected), step
    for line, said in zip(votes, expected, strict=True):
        assert line.endswith(said), step


def test_demo_on_sqlite(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"

    done = _run(_demo("--state-dir", str(state_dir)))

    verdict = _assert_story(done, state_dir)
    assert verdict["orchestrator_database"].startswith("sqlite:")
    assert (state_dir / "orchestrator.db").exists() and (state_dir / "receiver.db").exists()
    # Authentication was on: the credentials file holds hashes, never the tokens themselves.
    credentials = (state_dir / "credentials.json").read_text()
    assert (state_dir / "tokens" / "rita.token").read_text().strip() not in credentials

    # A second run on the same database would find the story already told: refused, not misreported.
    again = _run(
        _demo(
            "--state-dir",
            str(tmp_path / "again"),
            "--orchestrator-database-url",
            f"sqlite:///{state_dir}/orchestrator.db",
        )
    )
    assert again.returncode == 2
    assert "already hold case T-1042" in _verdict(again.stdout)["error"]
    _assert_all_stopped(_pids(again.stdout))


def _processes_naming(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # ended while we looked
        if text in argv:
            found.append(f"{cmdline.parent.name}: {argv}")
    return found


def test_demo_with_two_worker_processes_per_service(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"

    done = _run(_demo("--state-dir", str(state_dir), "--workers", "2"))

    verdict = _assert_story(done, state_dir)
    assert verdict["workers"] == 2
    assert "2 worker processes per service" in done.stdout
    for name in ("receiver", "orchestrator-A", "orchestrator-B"):
        log = read_log_file(state_dir / "logs" / f"{name}.log")
        workers = {record["worker"] for record in log.records if "worker" in record}
        # Both workers of every launch logged (the receiver was launched 4 times).
        assert workers == {0, 1}, (name, log.foreign)
    # The transcript names the parents; no worker outlives them.
    assert _processes_naming(str(state_dir)) == []


@pytest.mark.postgres
def test_demo_with_the_orchestrator_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    state_dir = tmp_path / "state"

    done = _run(_demo("--state-dir", str(state_dir), "--orchestrator-database-url", postgres_url))

    verdict = _assert_story(done, state_dir)
    assert verdict["orchestrator_database"].startswith("postgresql")
    assert not (state_dir / "orchestrator.db").exists()


def test_demo_refuses_a_state_dir_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "orchestrator.db").write_text("")

    done = _run(_demo("--state-dir", str(tmp_path)), timeout=60)

    assert done.returncode == 2
    assert "must be an empty directory" in done.stderr


def test_a_child_that_cannot_start_stops_the_others_and_the_verdict_says_why(tmp_path: Path) -> None:
    unwritable = "sqlite:////nonexistent-directory/receiver.db"

    done = _run(_demo("--state-dir", str(tmp_path / "state"), "--receiver-database-url", unwritable))

    assert done.returncode == 1
    verdict = _verdict(done.stdout)
    assert verdict["ok"] is False
    assert "receiver exited" in verdict["error"]
    # Orchestrator A was launched alongside the receiver, and was stopped with the failure.
    assert (tmp_path / "state" / "logs" / "orchestrator-A.log").exists()
    assert _processes_using(tmp_path / "state") == []
    assert "Stopped:" in done.stdout


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_demo_stops_every_child(tmp_path: Path, signum: int) -> None:
    demo = subprocess.Popen(
        _demo("--state-dir", str(tmp_path / "state")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    assert demo.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    # Interrupt once both services of step 1 are up.
    while time.monotonic() < deadline and "orchestrator A pid" not in "".join(seen):
        line = demo.stdout.readline()
        if not line:
            break
        seen.append(line)
    demo.send_signal(signum)
    rest, _ = demo.communicate(timeout=60)
    output = "".join(seen) + rest

    assert demo.returncode == 130, output
    verdict = _verdict(output)
    assert verdict["ok"] is False and verdict["error"] == "interrupted"
    _assert_all_stopped(_pids(output))
    assert _processes_using(tmp_path / "state") == []

"""``decisionflow audit monitor`` in a child process, against a real orchestrator process that publishes its
checkpoints: the first checkpoint is kept, a larger one is accepted by the log's consistency proof, and a
checkpoint of a fork made by restoring an older copy of the orchestrator's SQLite database (signed by a
sequencer given no publication to compare with) is refused with exit 4, the state kept and the fork's
checkpoint set aside; a rollback and a foreign signature are refused too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decisionflow.transparency import Checkpoint, NoteSigner, NoteVerifier, open_checkpoint, sign_checkpoint
from decisionflow_server.foundation.processes import ServiceProcess, free_port
from orchestrator.audit_log.signing import DEFAULT_ORIGIN, write_new_key
from tests.audit.test_commands import _command
from tests.audit.test_publication import _copy, _fetch, _wait, _write_events
from tests.support.stack import spawn_orchestrator, spawn_receiver

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _monitor(*args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "decisionflow_cli", "audit", "monitor", *args],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
        check=False,
    )


def test_the_monitor_accepts_the_log_growing_and_refuses_a_fork_made_by_a_restored_database(tmp_path: Path) -> None:
    database, published = tmp_path / "orchestrator.db", tmp_path / "published"
    key_file, vkey_file, state = tmp_path / "audit.key", tmp_path / "audit.vkey", tmp_path / "monitor.checkpoint"
    vkey = write_new_key(key_file, DEFAULT_ORIGIN).verifier().vkey
    vkey_file.write_text(vkey + "\n")
    _write_events(database, ["T-1", "T-2"])  # 3 leaves
    port = free_port()
    url = f"http://127.0.0.1:{port}/checkpoint"
    flags = ["--audit-signing-key-file", str(key_file), "--audit-interval-seconds", "0.2"]
    receiver = spawn_receiver(tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}")
    orchestrators: list[ServiceProcess] = []

    def start(*extra: str) -> ServiceProcess:
        started = spawn_orchestrator(
            tmp_path, f"sqlite:///{database}", receiver, f"orchestrator-{len(orchestrators)}", extra=[*flags, *extra]
        )
        orchestrators.append(started)
        return started

    def served_size() -> int:
        status, note = _fetch(url)
        return open_checkpoint(note, [NoteVerifier.from_vkey(vkey)]).size if status == 200 else 0

    def monitor(checkpoint: str, target: ServiceProcess) -> subprocess.CompletedProcess[str]:
        return _monitor(
            *("--checkpoint", checkpoint, "--state", str(state), "--public-key", str(vkey_file)),
            *("--target", target.target),
        )

    try:
        first = start("--audit-publish-dir", str(published), "--metrics-port", str(port))
        _wait(lambda: served_size() == 3, "the checkpoint of 3 served", first)
        seen = monitor(url, first)
        assert seen.returncode == 0 and "the first one seen" in seen.stderr, seen.stderr
        _copy(database, tmp_path / "older.db")
        _write_events(database, ["T-3", "T-4"])
        _wait(lambda: served_size() == 6, "the checkpoint of 6 served", first)
        grown = monitor(url, first)
        assert grown.returncode == 0, grown.stderr
        assert "consistent: checkpoint 6 extends checkpoint 3" in grown.stderr
        signed_six = _fetch(url)[1]
        assert state.read_text() == signed_six
        again = monitor(url, first)
        assert again.returncode == 0 and "unchanged: checkpoint 6" in again.stderr
        first.stop()

        # Restored from the older copy, the database takes other events, and a sequencer that compares with
        # no publication signs a tree of 7 whose first 6 leaves are not the ones published.
        _copy(tmp_path / "older.db", database)
        _write_events(database, ["T-8", "T-9", "T-10"])
        done = _command(
            "audit-checkpoint", "--database-url", f"sqlite:///{database}", "--audit-signing-key-file", str(key_file)
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["checkpoint"]["size"] == 7
        forked = tmp_path / "forked.checkpoint"
        forked.write_text(report["checkpoint"]["signed_note"])
        restored = start()  # the log's own proofs, of the restored database

        refused = monitor(str(forked), restored)
        assert refused.returncode == 4, refused.stderr
        assert "FORK: checkpoint 7 does not extend checkpoint 6" in refused.stderr
        assert state.read_text() == signed_six
        assert (tmp_path / "monitor.checkpoint.fork").read_text() == forked.read_text()
        assert monitor(str(forked), restored).returncode == 4  # and every run after, until someone looks
    finally:
        for process in orchestrators:
            process.stop()
        receiver.stop()


def test_the_monitor_refuses_a_rollback_a_same_size_fork_and_a_foreign_signature(tmp_path: Path) -> None:
    key = NoteSigner.from_seed(DEFAULT_ORIGIN, bytes(range(32)))
    vkey_file, state = tmp_path / "audit.vkey", tmp_path / "monitor.checkpoint"
    vkey_file.write_text(key.verifier().vkey + "\n")

    def checkpoint(name: str, size: int, root: bytes, signer: NoteSigner = key) -> str:
        path = tmp_path / name
        path.write_text(sign_checkpoint(Checkpoint(DEFAULT_ORIGIN, size, root), signer))
        return str(path)

    def monitor(path: str) -> subprocess.CompletedProcess[str]:
        # No --target: none of these needs a proof from the log.
        return _monitor("--checkpoint", path, "--state", str(state), "--public-key", str(vkey_file))

    kept = checkpoint("five", 5, b"\x05" * 32)
    assert monitor(kept).returncode == 0
    for name, size, root, said in (
        ("four", 4, b"\x04" * 32, "went back from size 5 to 4"),
        ("other-five", 5, b"\x55" * 32, "two checkpoints of size 5 with different roots"),
    ):
        refused = monitor(checkpoint(name, size, root))
        assert refused.returncode == 4 and said in refused.stderr, refused.stderr
    stranger = NoteSigner.from_seed(DEFAULT_ORIGIN, bytes(range(1, 33)))
    foreign = monitor(checkpoint("foreign", 9, b"\x09" * 32, stranger))
    assert foreign.returncode == 4 and "does not hold" in foreign.stderr, foreign.stderr
    assert state.read_text() == (tmp_path / "five").read_text()


def test_every_keeps_the_monitor_checking_until_a_fork_ends_it(tmp_path: Path) -> None:
    key = NoteSigner.from_seed(DEFAULT_ORIGIN, bytes(range(32)))
    vkey_file, state, published = tmp_path / "audit.vkey", tmp_path / "monitor.checkpoint", tmp_path / "checkpoint"
    vkey_file.write_text(key.verifier().vkey + "\n")
    published.write_text(sign_checkpoint(Checkpoint(DEFAULT_ORIGIN, 5, b"\x05" * 32), key))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    argv = [sys.executable, "-m", "decisionflow_cli", "audit", "monitor", "--every", "0.1"]
    args = ["--checkpoint", str(published), "--state", str(state), "--public-key", str(vkey_file)]
    with subprocess.Popen([*argv, *args], env=clean, stderr=subprocess.PIPE, text=True) as watching:
        try:
            deadline = time.monotonic() + 30
            while not state.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert state.exists() and watching.poll() is None  # kept, and still watching
            forked = tmp_path / "forked"
            forked.write_text(sign_checkpoint(Checkpoint(DEFAULT_ORIGIN, 5, b"\x55" * 32), key))
            forked.replace(published)  # whole: the monitor never reads half a checkpoint
            assert watching.wait(timeout=30) == 4
        finally:
            if watching.poll() is None:
                watching.kill()
        assert watching.stderr is not None
        assert "FORK: two checkpoints of size 5 with different roots" in watching.stderr.read()


def test_sigterm_stops_a_monitor_between_checks_with_exit_0(tmp_path: Path) -> None:
    """A container engine stops the monitor with SIGTERM: it ends while waiting for its next check, its state
    kept, with exit 0 (a stop is not a fork nor an error)."""
    key = NoteSigner.from_seed(DEFAULT_ORIGIN, bytes(range(32)))
    vkey_file, state, published = tmp_path / "audit.vkey", tmp_path / "monitor.checkpoint", tmp_path / "checkpoint"
    vkey_file.write_text(key.verifier().vkey + "\n")
    published.write_text(sign_checkpoint(Checkpoint(DEFAULT_ORIGIN, 5, b"\x05" * 32), key))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    argv = [sys.executable, "-m", "decisionflow_cli", "audit", "monitor", "--every", "600"]
    args = ["--checkpoint", str(published), "--state", str(state), "--public-key", str(vkey_file)]
    with subprocess.Popen([*argv, *args], env=clean, stderr=subprocess.PIPE, text=True) as watching:
        try:
            deadline = time.monotonic() + 30
            while not state.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert state.exists() and watching.poll() is None  # kept, and waiting for its next check
            watching.send_signal(signal.SIGTERM)
            assert watching.wait(timeout=30) == 0
        finally:
            if watching.poll() is None:
                watching.kill()
        assert watching.stderr is not None
        assert watching.stderr.read().splitlines()[-1] == "audit monitor: stopped"
    assert state.read_text() == published.read_text()


def test_nothing_published_yet_is_nothing_to_check_but_a_publication_gone_is_an_error(tmp_path: Path) -> None:
    key_file, vkey_file = tmp_path / "audit.key", tmp_path / "audit.vkey"
    state = tmp_path / "monitor.checkpoint"
    vkey_file.write_text(write_new_key(key_file, DEFAULT_ORIGIN).verifier().vkey + "\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}/checkpoint"
    receiver = spawn_receiver(tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}")
    flags = ["--audit-signing-key-file", str(key_file), "--audit-interval-seconds", "0.2"]
    flags += ["--audit-publish-dir", str(tmp_path / "published"), "--metrics-port", str(port)]
    started: list[ServiceProcess] = []
    try:
        empty = spawn_orchestrator(
            tmp_path, f"sqlite:///{tmp_path / 'orchestrator.db'}", receiver, "orchestrator", extra=flags
        )
        started.append(empty)
        assert _fetch(url)[0] == 404  # a log with no event has signed no checkpoint
        quiet = _monitor("--checkpoint", url, "--state", str(state), "--public-key", str(vkey_file))
        assert quiet.returncode == 0, quiet.stderr
        assert "no checkpoint is published yet" in quiet.stderr and f"{url} answered 404" in quiet.stderr
        assert not state.exists()
    finally:
        for process in started:
            process.stop()
        receiver.stop()

    # Once a checkpoint was kept, a publication that is gone is not "nothing yet": the monitor cannot check.
    signer = NoteSigner.from_seed(DEFAULT_ORIGIN, bytes(range(32)))
    vkey_file.write_text(signer.verifier().vkey + "\n")
    first = tmp_path / "first.checkpoint"
    first.write_text(sign_checkpoint(Checkpoint(DEFAULT_ORIGIN, 3, b"\x03" * 32), signer))
    kept = _monitor("--checkpoint", str(first), "--state", str(state), "--public-key", str(vkey_file))
    assert kept.returncode == 0, kept.stderr
    gone = _monitor("--checkpoint", str(tmp_path / "gone"), "--state", str(state), "--public-key", str(vkey_file))
    assert gone.returncode == 1, gone.stderr
    assert "no checkpoint is published" in gone.stderr and "checkpoint 3 of" in gone.stderr
    assert state.read_text() == first.read_text()

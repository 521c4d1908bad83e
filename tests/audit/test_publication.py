"""A restored database never signs a fork: the orchestrator publishes each signed checkpoint outside its
database (``--audit-publish-dir``), and after its SQLite file is restored from an older copy the sequencer,
as ``audit-checkpoint`` in a child process and as a running server, refuses to sign a tree that does not
extend the published checkpoint, says why, and signs again once the log extends it. The store's check on
SQLite and PostgreSQL, and the publication's file and its HTTP path, on their own."""

from __future__ import annotations

import shutil
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from decisionflow.transparency import Checkpoint, NoteVerifier, open_checkpoint, verify_consistency
from decisionflow_server.foundation.processes import ServiceProcess, free_port
from decisionflow_server.runtime.metrics import MetricsServer
from decisionflow_server.storage import db
from orchestrator.audit.publication import CheckpointDirectory, UnreadablePublication, read_note
from orchestrator.audit_log.signing import DEFAULT_ORIGIN, write_new_key
from orchestrator.store import OrchestratorStore, migrate
from tests.audit.test_commands import _command
from tests.support.audit import ORIGIN, SIGNER, T0, check_log, decision, proposal, started
from tests.support.stack import spawn_orchestrator, spawn_receiver

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _write_events(database: Path, cases: list[str]) -> None:
    """A proposal on each case, and a decision on the first (one process's writes, then gone)."""
    engine = db.create_engine(f"sqlite:///{database}")
    try:
        migrate(engine)
        store = OrchestratorStore(engine)
        for n, case in enumerate(cases):
            p = started(store, proposal(case_id=case))
            if n == 0:
                store.record_decision(decision(p), p.case_id, [])
    finally:
        engine.dispose()


def _copy(source: Path, target: Path) -> None:
    """Copy an SQLite database as a backup tool does (the online backup API), into a new or a live file."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def _database(database: Path) -> tuple[int, int]:
    """The log's size and its newest checkpoint's size (0 before one) in the database."""
    engine = db.create_engine(f"sqlite:///{database}")
    try:
        store = OrchestratorStore(engine)
        latest = store.latest_checkpoint()
        return store.audit_status().size, 0 if latest is None else latest.size
    finally:
        engine.dispose()


def _published_size(directory: Path, vkey: str) -> int:
    return open_checkpoint((directory / "checkpoint").read_text(), [NoteVerifier.from_vkey(vkey)]).size


def test_audit_checkpoint_publishes_and_after_a_restore_refuses_to_sign_until_the_log_extends_again(
    tmp_path: Path,
) -> None:
    database, published = tmp_path / "orchestrator.db", tmp_path / "published"
    key_file = tmp_path / "audit.key"
    vkey = write_new_key(key_file, DEFAULT_ORIGIN).verifier().vkey
    flags = ["--database-url", f"sqlite:///{database}", "--audit-publish-dir", str(published)]
    env = {"DECISIONFLOW_AUDIT_SIGNING_KEY_FILE": str(key_file)}

    def checkpoint() -> tuple[int, str]:
        done = _command("audit-checkpoint", *flags, env=env)
        return done.returncode, done.stderr

    _write_events(database, ["T-1", "T-2"])  # 3 leaves
    assert checkpoint()[0] == 0 and _published_size(published, vkey) == 3
    _copy(database, tmp_path / "older.db")
    _write_events(database, ["T-3", "T-4"])  # 6 leaves
    assert checkpoint()[0] == 0 and _published_size(published, vkey) == 6
    _copy(database, tmp_path / "newer.db")
    signed_six = (published / "checkpoint").read_text()

    # Restored from the older copy, the database holds 3 leaves: it has lost 3 the log vouched for.
    _copy(tmp_path / "older.db", database)
    code, said = checkpoint()
    assert code == 1 and "fewer than the 6 of the published checkpoint" in said
    # Then other events take their places: a tree of 7 whose first 6 leaves are not the published ones.
    _write_events(database, ["T-8", "T-9", "T-10"])
    code, said = checkpoint()
    assert code == 1 and "has forked from what was published" in said
    assert _database(database) == (7, 3)  # sequenced, never signed
    assert (published / "checkpoint").read_text() == signed_six

    # The newer copy holds every published leaf: the log extends the checkpoint again, and grows.
    _copy(tmp_path / "newer.db", database)
    _write_events(database, ["T-11"])
    code, said = checkpoint()
    assert code == 0, said
    assert _database(database) == (8, 8) and _published_size(published, vkey) == 8


def _fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        error.close()
        return error.code, ""


def _wait(condition: Callable[[], bool], what: str, process: ServiceProcess, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s; the orchestrator's log:\n{process.log()[-4000:]}")
        time.sleep(0.1)


def _gauge(metrics: str, name: str) -> float | None:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


@pytest.mark.slow
def test_a_server_whose_database_is_restored_refuses_to_sign_says_so_once_and_signs_again_after(
    tmp_path: Path,
) -> None:
    database, published = tmp_path / "orchestrator.db", tmp_path / "published"
    key_file = tmp_path / "audit.key"
    vkey = write_new_key(key_file, DEFAULT_ORIGIN).verifier().vkey
    _write_events(database, ["T-1", "T-2"])  # 3 leaves
    port = free_port()
    extra = [
        *("--audit-signing-key-file", str(key_file), "--audit-publish-dir", str(published)),
        *("--audit-interval-seconds", "0.2", "--metrics-port", str(port)),
    ]
    base = f"http://127.0.0.1:{port}"
    receiver = spawn_receiver(tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}")
    try:
        orchestrator = spawn_orchestrator(tmp_path, f"sqlite:///{database}", receiver, "orchestrator", extra=extra)
        try:

            def served_size() -> int:
                status, note = _fetch(f"{base}/checkpoint")
                return open_checkpoint(note, [NoteVerifier.from_vkey(vkey)]).size if status == 200 else 0

            def refusing() -> float | None:
                return _gauge(_fetch(f"{base}/metrics")[1], "decisionflow_audit_signing_refused")

            _wait(lambda: served_size() == 3, "the checkpoint of 3 served", orchestrator)
            assert refusing() == 0
            _copy(database, tmp_path / "older.db")
            _write_events(database, ["T-3", "T-4"])
            _wait(lambda: served_size() == 6, "the checkpoint of 6 served", orchestrator)
            _copy(database, tmp_path / "newer.db")
            signed_six = _fetch(f"{base}/checkpoint")[1]
            assert signed_six == (published / "checkpoint").read_text()

            # A fork made offline from the older copy, then restored into the running server's database.
            shutil.copyfile(tmp_path / "older.db", tmp_path / "fork.db")
            _write_events(tmp_path / "fork.db", ["T-8", "T-9", "T-10"])
            _copy(tmp_path / "fork.db", database)
            _wait(lambda: refusing() == 1, "the refusal reported", orchestrator)
            _wait(lambda: _database(database)[0] == 7, "the forked entries sequenced", orchestrator)
            time.sleep(1)  # several more passes, each refusing again
            assert orchestrator.log().count("not signing a checkpoint of size 7") == 1
            assert "has forked from what was published" in orchestrator.log()
            assert _database(database) == (7, 3)
            assert _fetch(f"{base}/checkpoint")[1] == signed_six

            _copy(tmp_path / "newer.db", database)
            _wait(lambda: refusing() == 0, "the recovery reported", orchestrator)
            assert orchestrator.log().count("extends the published checkpoint of size 6 again") == 1
            _write_events(database, ["T-11"])
            _wait(lambda: served_size() == 8, "the checkpoint of 8 served", orchestrator)
        finally:
            orchestrator.stop()
    finally:
        receiver.stop()
    engine = db.create_engine(f"sqlite:///{database}")
    try:
        store = OrchestratorStore(engine)
        six, eight = store.checkpoint(6), store.latest_checkpoint()
        assert six is not None and eight is not None and eight.size == 8
        verify_consistency(6, 8, store.consistency_proof(6, 8), six.root_hash, eight.root_hash)
    finally:
        engine.dispose()


def test_the_store_signs_only_a_tree_that_extends_the_published_checkpoint(audit_store: OrchestratorStore) -> None:
    for case in ("T-1", "T-2"):
        started(audit_store, proposal(case_id=case))
    first = audit_store.sequence_audit_log(100, SIGNER, T0).checkpoint
    assert first is not None and first.size == 2
    published = Checkpoint(ORIGIN, first.size, first.root_hash)
    started(audit_store, proposal(case_id="T-3"))

    other_root = audit_store.sequence_audit_log(100, SIGNER, T0, published=Checkpoint(ORIGIN, 2, bytes(32)))
    assert (other_root.sequenced, other_root.size, other_root.checkpoint) == (1, 3, None)
    assert other_root.refused is not None and "has forked" in other_root.refused.reason
    larger = audit_store.sequence_audit_log(100, SIGNER, T0, published=Checkpoint(ORIGIN, 4, first.root_hash))
    assert larger.checkpoint is None and larger.refused is not None and "fewer than the 4" in larger.refused.reason
    assert audit_store.latest_checkpoint() == first

    extended = audit_store.sequence_audit_log(100, SIGNER, T0, published=published)
    assert extended.refused is None and extended.checkpoint is not None and extended.checkpoint.size == 3
    assert check_log(audit_store, [first, extended.checkpoint], SIGNER.vkey, ORIGIN) == 3


def test_the_publication_only_grows_and_is_served_read_only(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path / "published")
    assert directory.latest() is None and directory.read_bytes() is None
    three = SIGNER.sign(3, bytes(32))
    assert directory.publish(SIGNER.sign(5, bytes(32)))
    assert not directory.publish(three)  # never back to a smaller checkpoint
    assert directory.latest() == read_note(SIGNER.sign(5, bytes(32)))

    registry = CollectorRegistry()
    empty = CheckpointDirectory(tmp_path / "empty")
    served = MetricsServer.start(registry, 0, files={"/checkpoint": directory.read_bytes, "/none": empty.read_bytes})
    try:
        base = f"http://127.0.0.1:{served.port}"
        assert _fetch(f"{base}/checkpoint") == (200, SIGNER.sign(5, bytes(32)))
        assert _fetch(f"{base}/none")[0] == 404
        posted = urllib.request.Request(f"{base}/checkpoint", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(posted, timeout=10)
        refused.value.close()
        assert refused.value.code == 405
    finally:
        served.close()
    (directory.path / "checkpoint").write_text("not a checkpoint\n")
    with pytest.raises(UnreadablePublication):
        directory.latest()

"""``decisionflow-orchestrator audit-keygen`` and ``audit-checkpoint`` as the real entry point in a child
process: a key file made once and never overwritten, its verifier key printed; a checkpoint signed with it
that an auditor opens; without a key, the log sequenced and nothing signed; a bad key file refused."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from decisionflow.transparency import NoteSigner, NoteVerifier, open_checkpoint
from decisionflow_server.storage import db
from orchestrator.audit_log.signing import DEFAULT_ORIGIN
from orchestrator.store import OrchestratorStore, migrate
from tests.support.audit import check_log, decision, proposal, started

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def _command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.main", *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=60,
        check=False,
    )


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_keygen_writes_a_private_key_file_once_and_prints_its_verifier_key(tmp_path: Path) -> None:
    key_file = tmp_path / "audit.key"
    made = _report(_command("audit-keygen", "--out", str(key_file), "--audit-origin", "example.org/log"))

    signer = NoteSigner.from_skey(key_file.read_text().strip())
    assert made == {
        "command": "audit-keygen",
        "key_file": str(key_file),
        "name": "example.org/log",
        "vkey": signer.verifier().vkey,
    }
    assert NoteVerifier.from_vkey(str(made["vkey"])).name == "example.org/log"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    before = key_file.read_bytes()
    again = _command("audit-keygen", "--out", str(key_file))
    assert again.returncode == 1 and "never overwritten" in again.stderr
    assert key_file.read_bytes() == before
    default = _report(_command("audit-keygen", "--out", str(tmp_path / "default.key")))
    assert default["name"] == DEFAULT_ORIGIN


@pytest.fixture
def logged_database(database_url: str) -> str:
    """A migrated orchestrator database holding three events (none sequenced)."""
    engine = db.create_engine(database_url)
    try:
        migrate(engine)
        store = OrchestratorStore(engine)
        p = started(store, proposal())
        store.record_decision(decision(p), p.case_id, [])
        started(store, proposal(case_id="T-2"))
    finally:
        engine.dispose()
    return database_url


def test_audit_checkpoint_sequences_and_signs_once_and_reports_the_newest_checkpoint(
    tmp_path: Path, logged_database: str
) -> None:
    key_file = tmp_path / "audit.key"
    vkey = str(_report(_command("audit-keygen", "--out", str(key_file)))["vkey"])
    env = {"DECISIONFLOW_AUDIT_SIGNING_KEY_FILE": str(key_file)}

    first = _report(_command("audit-checkpoint", "--database-url", logged_database, env=env))
    assert (first["sequenced"], first["size"], first["signed"]) == (3, 3, True)
    checkpoint = first["checkpoint"]
    assert isinstance(checkpoint, dict)
    opened = open_checkpoint(str(checkpoint["signed_note"]), [NoteVerifier.from_vkey(vkey)], origin=DEFAULT_ORIGIN)
    assert opened.size == checkpoint["size"] == 3

    again = _report(_command("audit-checkpoint", "--database-url", logged_database, env=env))
    assert (again["sequenced"], again["size"], again["signed"], again["checkpoint"]) == (0, 3, False, checkpoint)

    engine = db.create_engine(logged_database)
    try:
        store = OrchestratorStore(engine)
        latest = store.latest_checkpoint()
        assert latest is not None and latest.signed_note == checkpoint["signed_note"]
        assert check_log(store, [latest], vkey, DEFAULT_ORIGIN) == 3
    finally:
        engine.dispose()


def test_audit_checkpoint_without_a_key_sequences_and_signs_nothing(logged_database: str) -> None:
    done = _command("audit-checkpoint", "--database-url", logged_database)
    report = _report(done)
    assert (report["sequenced"], report["size"], report["signed"], report["checkpoint"]) == (3, 3, False, None)
    assert "no checkpoint signed: no --audit-signing-key-file" in done.stderr


def test_a_key_file_that_holds_no_signing_key_is_refused_without_quoting_it(
    tmp_path: Path, logged_database: str
) -> None:
    key_file = tmp_path / "audit.key"
    key_file.write_text("PRIVATE+KEY+name+00000000+c2VjcmV0LXNlY3JldA==\n")
    done = _command("audit-checkpoint", "--database-url", logged_database, "--audit-signing-key-file", str(key_file))
    assert done.returncode == 2
    assert "--audit-signing-key-file" in done.stderr and "not an audit signing key" in done.stderr
    assert "c2VjcmV0" not in done.stderr

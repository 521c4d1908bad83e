"""The audit log's whole path on the real store, as an operator and an auditor run it: an authenticated
orchestrator writes the leaves of real operations, ``decisionflow-orchestrator audit-keygen`` and
``audit-checkpoint`` (child processes) make the key and sign two checkpoints, and ``decisionflow audit
export`` and ``verify`` take the log away and check it. A good history verifies and its counts are the
database's; each tampering with the database afterwards is refused, naming the leaf or checkpoint."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from decisionflow.transparency import DecisionLeaf, decode_leaf
from decisionflow_server.storage import db
from tests.support.review_cli import Cli, proposal_file
from tests.support.stack import count

pytestmark = pytest.mark.slow


def _orchestrator(*args: str) -> dict[str, Any]:
    """Run ``decisionflow-orchestrator ARGS`` as a process (no DECISIONFLOW_ setting from this one); its report."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.main", *args],
        check=False,
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@dataclass
class History:
    """A stack whose real log holds two signed checkpoints of real operations, and the auditor's files."""

    cli: Cli
    directory: Path
    key_file: Path  # the signing key, the operator's
    vkey_file: Path  # its verifier key, the auditor's
    older: Path  # the first checkpoint's signed note, kept by the auditor
    approved: str

    @property
    def url(self) -> str:
        return self.cli.stack.orchestrator_url

    def checkpoint(self, key_file: Path | None = None) -> dict[str, Any]:
        """Sequence the backlog and sign, as ``audit-checkpoint`` with key_file (default the log's key)."""
        key = key_file or self.key_file
        return _orchestrator("audit-checkpoint", "--database-url", self.url, "--audit-signing-key-file", str(key))

    def audit(self, *args: str, principal: str | None = None) -> tuple[int, str, str]:
        """Run ``decisionflow audit ARGS`` in process (against the stack as principal, when given)."""
        return self.cli.raw("audit", *args, principal=principal)

    def export(self, *scope: str) -> Path:
        """``audit export`` of scope (default ``--all``) as the auditor, with the kept checkpoint; its path."""
        path = self.directory / "log.bundle.json"
        argv = ["export", *(scope or ("--all",)), "--since", str(self.older), "--out", str(path)]
        exit_code, _, err = self.audit(*argv, principal="audrey")
        assert exit_code == 0, err
        return path

    def verify(self, bundle: Path, *extra: str) -> tuple[int, str, str]:
        """``audit verify BUNDLE --public-key VKEY --since OLD`` offline."""
        return self.audit(
            "verify", str(bundle), "--public-key", str(self.vkey_file), "--since", str(self.older), *extra
        )

    def sql(self, *statements: str, **params: object) -> None:
        """Tamper with the orchestrator's database, in one transaction."""
        engine = db.create_engine(self.url, pool_size=1)
        try:
            with engine.begin() as conn:
                for statement in statements:
                    conn.execute(sa.text(statement), params)
        finally:
            engine.dispose()


@pytest.fixture
def history(make_cli: Callable[..., Cli], database_url: str, tmp_path: Path) -> History:
    cli = make_cli(orchestrator_url=database_url)  # no audit_log=: the store's own log is served

    def start(case_id: str) -> str:
        run = cli("start", str(proposal_file(tmp_path, case_id)), principal="ava")
        assert run.exit_code == 0, run.stderr
        return str(run.document["operation_id"])

    key_file, vkey_file = tmp_path / "audit.key", tmp_path / "audit.vkey"
    vkey_file.write_text(_orchestrator("audit-keygen", "--out", str(key_file))["vkey"] + "\n")
    approved, declined, _pending = start("T-1"), start("T-2"), start("T-3")
    assert cli("approve", approved).exit_code == 0
    assert cli("decline", declined).exit_code == 0
    history = History(cli, tmp_path, key_file, vkey_file, tmp_path / "kept-checkpoint.txt", approved)
    first = history.checkpoint()
    assert first["signed"] is True
    history.older.write_text(first["checkpoint"]["signed_note"])

    edit = tmp_path / "edit.json"
    policy = {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}}
    edit.write_text(json.dumps({"body": "Please update to 4.2.1.", "evidence": [], "policy": policy}))
    edited = cli("edit", start("T-4"), str(edit), principal="ava")
    assert edited.exit_code == 0, edited.stderr
    assert cli("approve", str(edited.document["operation_id"])).exit_code == 0
    second = history.checkpoint()
    assert second["signed"] is True and second["size"] > first["checkpoint"]["size"]
    return history


def _bundle_leaves(bundle: Path) -> list[tuple[int, Any]]:
    return [
        (leaf["index"], decode_leaf(base64.b64decode(leaf["data"])))
        for leaf in json.loads(bundle.read_text())["leaves"]
    ]


def test_the_whole_log_verifies_against_the_kept_checkpoint_and_counts_what_the_database_holds(
    history: History,
) -> None:
    bundle = history.export()

    exit_code, out, err = history.verify(bundle, "--json")

    assert (exit_code, err) == (0, ""), err
    proof = json.loads(out)
    proposals = count(history.url, "SELECT count(*) FROM proposals")
    decisions = count(history.url, "SELECT count(*) FROM decisions")
    assert proof["verified"] is True and proof["whole_log"] is True
    assert proof["since_size"] == int(history.older.read_text().splitlines()[1])
    assert proof["tree_size"] == proof["leaves"] == count(history.url, "SELECT count(*) FROM audit_entries")
    assert proof["kinds"]["proposal"] == proposals == proof["operations"] == proof["records"] == 5
    assert proof["kinds"]["decision"] == decisions == 3
    assert proof["kinds"].get("effect", 0) == history.cli.stack.effects() == 2
    exit_code, out, _ = history.verify(bundle)
    assert exit_code == 0 and "consistent with checkpoint" in out and "5 orchestrator record(s) agree" in out


def _decision_index(bundle: Path, operation_id: str) -> int:
    return next(
        i for i, leaf in _bundle_leaves(bundle) if isinstance(leaf, DecisionLeaf) and leaf.operation_id == operation_id
    )


def test_a_decision_row_edited_in_the_database_contradicts_its_leaf(history: History) -> None:
    history.sql("UPDATE decisions SET reviewer = 'mallory' WHERE operation_id = :op", op=history.approved)

    bundle = history.export()
    exit_code, _, err = history.verify(bundle)

    assert exit_code == 1
    assert f"leaf {_decision_index(bundle, history.approved)} does not hold" in err and "mallory" in err


def test_a_leaf_edited_in_the_entries_table_no_longer_leads_to_the_signed_root(history: History) -> None:
    index = _decision_index(history.export(), history.approved)
    history.sql(
        "UPDATE audit_entries SET leaf = :leaf WHERE leaf_index = :index", leaf=_edited(history, index), index=index
    )

    whole = history.verify(history.export())
    exit_code, _, err = history.verify(history.export("--operation", history.approved))

    # The whole log's proofs are computed from its leaves, so each misses the signed root (the first leaf is
    # named, whichever was edited); the operation's proofs come from the stored subtree hashes, so exactly
    # the edited leaf is named.
    assert whole[0] == 1 and "its inclusion proof does not hold" in whole[2]
    assert exit_code == 1
    assert f"leaf {index} does not hold: its inclusion proof does not hold" in err


def _edited(history: History, index: int) -> bytes:
    engine = db.create_engine(history.url, pool_size=1)
    try:
        with engine.connect() as conn:
            leaf = bytes(
                conn.execute(sa.text("SELECT leaf FROM audit_entries WHERE leaf_index = :i"), {"i": index}).scalar_one()
            )
    finally:
        engine.dispose()
    assert b"rita" in leaf
    return leaf.replace(b"rita", b"eve_")


def test_a_log_truncated_and_signed_again_does_not_extend_the_kept_checkpoint(history: History) -> None:
    kept = int(history.older.read_text().splitlines()[1])
    keep = kept - 2
    history.sql(
        "DELETE FROM audit_entries WHERE leaf_index >= :keep",
        "DELETE FROM audit_nodes WHERE (node_index + 1) * (1 << level) > :keep",
        "DELETE FROM audit_checkpoints WHERE size > :keep",
        keep=keep,
    )
    for case_id in ("T-5", "T-6", "T-7", "T-8"):
        assert history.cli("start", str(proposal_file(history.directory, case_id)), principal="ava").exit_code == 0
    assert history.checkpoint()["size"] == keep + 4 > kept

    exit_code, _, err = history.verify(history.export())

    assert exit_code == 4
    assert f"the --since checkpoint does not hold: checkpoint {keep + 4} does not extend it" in err


def test_a_log_rebuilt_and_signed_by_another_key_is_refused_at_its_checkpoint(history: History) -> None:
    other = history.directory / "other.key"
    _orchestrator("audit-keygen", "--out", str(other))
    history.sql(
        "DELETE FROM audit_checkpoints", "DELETE FROM audit_nodes", "UPDATE audit_entries SET leaf_index = NULL"
    )
    assert history.checkpoint(other)["signed"] is True
    bundle = history.directory / "rebuilt.json"
    assert history.audit("export", "--all", "--out", str(bundle), principal="audrey")[0] == 0

    exit_code, _, err = history.verify(bundle)

    assert exit_code == 4
    assert "checkpoint does not hold: the note has no signature by a trusted key" in err


def test_two_leaves_swapped_in_the_entries_table_are_detected(history: History) -> None:
    leaves = dict(_bundle_leaves(history.export()))
    assert (leaves[1].case_id, leaves[2].case_id) == ("T-2", "T-3")  # the two proposals started second and third
    history.sql(
        "UPDATE audit_entries SET leaf_index = -1 WHERE leaf_index = 1",
        "UPDATE audit_entries SET leaf_index = 1 WHERE leaf_index = 2",
        "UPDATE audit_entries SET leaf_index = 2 WHERE leaf_index = -1",
    )

    whole = history.verify(history.export())
    exit_code, _, err = history.verify(history.export("--case", "T-2"))

    # As for an edited leaf: the whole log is refused; the case's own proofs name the moved leaf.
    assert whole[0] == 1 and "its inclusion proof does not hold" in whole[2]
    assert exit_code == 1
    assert "leaf 2 does not hold: its inclusion proof does not hold" in err

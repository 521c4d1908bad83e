"""The audit log's whole path on the real store, as an operator and an auditor run it: an authenticated
orchestrator writes the leaves of real operations, ``decisionflow-orchestrator audit-keygen`` and
``audit-checkpoint`` (child processes) make the key and sign two checkpoints, and ``decisionflow audit
export`` and ``verify`` take the log away and check it. A good history verifies and its counts are the
database's; each tampering with the database afterwards is refused, naming the leaf or checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from decisionflow.transparency import DecisionLeaf
from decisionflow_server.storage import db
from tests.support.audit_history import History, bundle_leaves, orchestrator_command
from tests.support.review_cli import proposal_file
from tests.support.stack import count

pytestmark = pytest.mark.slow


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
        i for i, leaf in bundle_leaves(bundle) if isinstance(leaf, DecisionLeaf) and leaf.operation_id == operation_id
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

    said = f"the --since checkpoint does not hold: checkpoint {keep + 4} does not extend it"
    bundle = history.directory / "truncated.bundle.json"
    for scope in (("--all",), ("--case", "T-5")):
        argv = ["export", *scope, "--since", str(history.older), "--out", str(bundle)]
        exit_code, out, err = history.audit(*argv, principal="audrey")
        # Refused at export, as verify refuses it, and nothing written.
        assert (exit_code, out, bundle.exists()) == (4, "", False)
        assert f"decisionflow audit: {said}: " in err

    exit_code, _, err = history.verify(history.export(since=False))  # the whole log's leaves prove it

    assert exit_code == 4
    assert said in err


def test_a_log_rebuilt_and_signed_by_another_key_is_refused_at_its_checkpoint(history: History) -> None:
    other = history.directory / "other.key"
    orchestrator_command("audit-keygen", "--out", str(other))
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
    leaves = dict(bundle_leaves(history.export()))
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

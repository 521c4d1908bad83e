"""``decisionflow audit export`` and ``verify`` over a real orchestrator's log holding a review under a two-stage
rule (two of the leads, then one of finance): the proposal leaf carries the rule, three vote leaves the quorum,
and the whole log verifies offline. A vote leaf forged in the log and signed again with the log's own key still
leads to the signed root, and is refused by the history check, naming the leaf; so is a log with a vote dropped,
at the decision its votes no longer complete."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from decisionflow.transparency import VoteLeaf
from decisionflow_server.runtime.auth import Role
from decisionflow_server.storage import db
from tests.support.audit_history import History, bundle_leaves, new_history
from tests.support.review_cli import cli_in, proposal_file
from tests.support.rules_desk import write_desk_files

pytestmark = pytest.mark.slow

VOTERS = {"lena": ["support-leads"], "lou": ["support-leads"], "fay": ["finance"]}


@pytest.fixture
def quorum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[History, str]]:
    """A history whose one review reached its quorum (lena, lou, then fay) under TWO_STAGES, signed and kept; and
    the review's operation id."""
    (stack := tmp_path / "stack").mkdir()
    (files := tmp_path / "files").mkdir()
    desk = write_desk_files(stack, {name: ([Role.REVIEWER], groups) for name, groups in VOTERS.items()})
    with cli_in(stack, capsys, review_rules_file=desk.rules) as cli:
        for name, token in desk.tokens.items():
            cli.tokens[name] = stack / f"{name}.token"
            cli.tokens[name].write_text(token + "\n")
        history = new_history(cli, files)
        started = cli("start", str(proposal_file(files, "T-1")), principal="ava")
        op = str(started.document["operation_id"])
        outcomes = [cli("approve", op, principal=name).document["outcome"] for name in VOTERS]
        assert outcomes == ["AWAITING_APPROVALS", "AWAITING_APPROVALS", "COMMITTED"]
        history.keep(history.checkpoint())
        yield history, op


def test_a_log_with_a_two_stage_quorum_verifies_and_counts_its_votes(quorum: tuple[History, str]) -> None:
    history, op = quorum
    bundle = history.export()

    exit_code, out, err = history.verify(bundle, "--json")

    assert (exit_code, err) == (0, ""), err
    proof = json.loads(out)
    assert proof["verified"] is True and proof["whole_log"] is True
    assert proof["kinds"] == {"proposal": 1, "vote": 3, "decision": 1, "effect": 1}
    votes = [leaf for _, leaf in bundle_leaves(bundle) if isinstance(leaf, VoteLeaf)]
    assert [(v.principal, v.stage_index, v.groups) for v in votes] == [
        ("lena", 0, ("support-leads",)),
        ("lou", 0, ("support-leads",)),
        ("fay", 1, ("finance",)),
    ]
    exit_code, _, err = history.verify(history.export("--operation", op))
    assert exit_code == 0, err


def _resigned(history: History, *statements: str, **params: object) -> Path:
    """Tamper with the log's entries, sequence and sign it again with its own key; the whole log's bundle."""
    history.sql(
        *statements,
        "DELETE FROM audit_checkpoints",
        "DELETE FROM audit_nodes",
        "UPDATE audit_entries SET leaf_index = NULL",
        **params,
    )
    assert history.checkpoint()["signed"] is True
    return history.export(since=False)


def _leaf_index(history: History, principal: str) -> int:
    return next(
        i for i, leaf in bundle_leaves(history.export()) if isinstance(leaf, VoteLeaf) and leaf.principal == principal
    )


def _leaf(history: History, index: int) -> bytes:
    engine = db.create_engine(history.url, pool_size=1)
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT leaf FROM audit_entries WHERE leaf_index = :i")
            return bytes(conn.execute(query, {"i": index}).scalar_one())
    finally:
        engine.dispose()


def test_a_vote_leaf_forged_and_signed_again_is_refused_by_the_history_naming_the_leaf(
    quorum: tuple[History, str],
) -> None:
    history, _ = quorum
    index = _leaf_index(history, "fay")
    leaf = _leaf(history, index)
    assert leaf.count(b"finance") == 1
    forged = leaf.replace(b"finance", b"fxnance")  # fay now held no group the finance stage admits

    bundle = _resigned(
        history,
        "UPDATE audit_entries SET leaf = :leaf, leaf_hash = :hash WHERE leaf_index = :i",
        leaf=forged,
        hash=hashlib.sha256(b"\x00" + forged).digest(),  # its RFC 9162 leaf hash, so the tree is rebuilt over it
        i=index,
    )
    exit_code, _, err = history.verify(bundle, since=False)

    assert exit_code == 1
    assert f"leaf {index} does not hold: a vote of fay the review's rule refuses" in err


def test_a_log_with_a_vote_dropped_and_signed_again_is_refused_at_the_vote_it_leaves_uncounted(
    quorum: tuple[History, str],
) -> None:
    history, _ = quorum
    bundle = _resigned(history, "DELETE FROM audit_entries WHERE leaf_index = :i", i=_leaf_index(history, "lou"))
    fay = next(i for i, leaf in bundle_leaves(bundle) if isinstance(leaf, VoteLeaf) and leaf.principal == "fay")

    exit_code, _, err = history.verify(bundle, since=False)

    # Without lou's approval the leads' stage is still open when fay, of finance only, votes.
    assert exit_code == 1
    assert f"leaf {fay} does not hold: a vote of fay the review's rule refuses" in err

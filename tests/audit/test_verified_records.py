"""The orchestrator's records in a bundle, checked by ``decisionflow audit verify`` against real leaves: an
operation settled by the reconciler after the receiver lost its reply (a settlement leaf), one committed
in the ordinary way (an effect leaf), each receipt changed or cleared in the orchestrator's database
afterwards, and bundles whose records were removed, doubled or added after export."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from decisionflow.transparency import EffectLeaf, SettlementLeaf
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.audit_history import History, HistoryImages, bundle_leaves
from tests.support.reconciling import LOST_REPLY, reconcile
from tests.support.review_cli import Cli

pytestmark = pytest.mark.slow

EXIT_UNKNOWN = 42


@dataclass
class Receipts:
    """A signed log holding a settlement leaf and an effect leaf, and the two operations they name."""

    history: History
    settled: str
    committed: str


def build_receipts(cli: Cli, history: History) -> tuple[str, str]:
    """A settlement leaf and an effect leaf in a signed log, kept by the auditor; their operations."""
    settled = history.start("T-settled")
    # The receiver commits and loses every reply: the approval ends Unknown, its effect written.
    assert cli("approve", settled, "--timeout", "3").exit_code in (EXIT_UNKNOWN, 1)
    stack = cli.stack
    stack.stop_orchestrator()
    stack.start_receiver()  # replies are delivered again from here on
    stack.start_orchestrator(security=ServerSecurity(credentials_file=cli.tokens["ops"].with_name("credentials.json")))
    committed = history.start("T-committed")
    assert cli("approve", committed).exit_code == 0
    summary = reconcile(stack, orchestrator_token=cli.tokens["ops"].read_text().strip(), no_redrive=True)
    assert summary.settled == 1
    history.keep(history.checkpoint())
    kinds = {type(leaf): leaf.operation_id for _, leaf in bundle_leaves(history.export())}
    assert (kinds[SettlementLeaf], kinds[EffectLeaf]) == (settled, committed)
    assert history.verify(history.export())[0] == 0
    return settled, committed


@pytest.fixture
def receipts(
    history_images: HistoryImages,
    database_kind: str,
    make_cli: Callable[..., Cli],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> Iterator[Receipts]:
    """build_receipts' history (built once per worker and kind of database), on a copy of its databases."""
    image = history_images.get(
        "receipts",
        database_kind,
        capsys,
        build_receipts,
        receiver_failpoints=LOST_REPLY,
        receiver_timeout_seconds=1.0,
    )
    with image.copy(make_cli, tmp_path) as history:
        yield Receipts(history, *image.made)


def _logged_receipt(bundle: Path, operation_id: str) -> tuple[int, str]:
    """The index and receipt of the operation's effect or settlement leaf in the bundle."""
    return next(
        (index, leaf.receipt_id)
        for index, leaf in bundle_leaves(bundle)
        if isinstance(leaf, EffectLeaf | SettlementLeaf) and leaf.operation_id == operation_id
    )


def test_a_receipt_changed_or_cleared_in_the_database_contradicts_its_settlement_or_effect_leaf(
    receipts: Receipts,
) -> None:
    history = receipts.history
    refused = []
    for operation_id, receipt_id in (
        (receipts.settled, "rcpt-forged"),
        (receipts.settled, None),
        (receipts.committed, "rcpt-forged"),
        (receipts.committed, None),
    ):
        index, logged = _logged_receipt(history.export("--operation", operation_id), operation_id)
        history.sql("UPDATE operations SET receipt_id = :r WHERE operation_id = :op", r=receipt_id, op=operation_id)
        said = "receipt 'rcpt-forged'" if receipt_id else "no receipt"
        for scope in (("--operation", operation_id), ("--all",)):
            exit_code, out, err = history.verify(history.export(*scope))
            assert (exit_code, out) == (1, "")
            assert (
                f"record of {operation_id} does not hold: the orchestrator records {said}, "
                f"the log '{logged}' (leaf {index})" in err
            ), err
            refused.append(exit_code)
        history.sql("UPDATE operations SET receipt_id = :r WHERE operation_id = :op", r=logged, op=operation_id)
    assert refused == [1] * 8
    assert history.verify(history.export())[0] == 0


def test_a_bundle_with_a_record_removed_doubled_or_added_is_refused(receipts: Receipts) -> None:
    history = receipts.history
    bundle = history.export("--all")
    document = json.loads(bundle.read_text())
    records = document["records"]
    [settled_record] = [r for r in records if r["operation_id"] == receipts.settled]
    others = [r for r in records if r["operation_id"] != receipts.settled]
    foreign = {**settled_record, "operation_id": "op-v1-" + "0" * 64}
    cases = {
        "removed": (others, f"record of {receipts.settled} does not hold: it is missing"),
        "doubled": ([*records, settled_record], f"record of {receipts.settled} does not hold: it is given 2 times"),
        "added": ([*records, foreign], f"record of {foreign['operation_id']} does not hold: the bundle's leaves name"),
        "all removed": ([], "does not hold: it is missing"),
    }
    exits = {}
    for name, (changed, said) in cases.items():
        tampered = history.directory / f"{name.replace(' ', '-')}.bundle.json"
        tampered.write_text(json.dumps({**document, "records": changed}))
        exit_code, out, err = history.verify(tampered, "--json")
        exits[name] = exit_code
        assert said in err, err
        assert json.loads(out)["what"] == "record"
    assert exits == dict.fromkeys(cases, 1)

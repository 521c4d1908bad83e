"""The orchestrator's records against the verified leaves: what a bundle's records prove, and no more.

The records are the orchestrator's answers to GetOperation when the bundle was exported; nothing
signs them. Once the leaves hold, the records are checked one to one against the bundle's scope:

    one record      for each operation the leaves name (and the scope's own operation): none
                    missing, none given twice, none of an operation the leaves do not name
    found           the orchestrator still has the operation the log holds
    decision        the record's decision and reviewer are the decision leaf's; no decision
                    where the log holds none (decided after the checkpoint: export again later)
    receipt         where the log holds a receipt of the operation (an effect leaf, or a
                    settlement leaf: the receipt a lookup found), the record's receipt is one of
                    them; an empty receipt there is refused

So a bundle whose records agree proves that, when it was exported, the orchestrator's database said
of every operation of the scope what the log said: who decided it, how, and which receipt the
receiver gave. It proves nothing of a receipt or state recorded after the checkpoint (the log holds
no leaf of it yet), and, the records being unsigned, nothing to anyone who does not trust the
export itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from decisionflow.audit_bundle._format import Record
from decisionflow.audit_bundle._trust import BundleRefused
from decisionflow.transparency import EffectLeaf, History, LoggedOperation, SettlementLeaf
from decisionflow.vocabulary import OperationId


def logged_receipts(logged: LoggedOperation) -> dict[int, str]:
    """The receipts the log holds of an operation, by leaf index: its effect and settlement leaves'."""
    return {
        index: leaf.receipt_id
        for index, leaf in sorted(logged.leaves.items())
        if isinstance(leaf, EffectLeaf | SettlementLeaf) and leaf.receipt_id
    }


def _finding(record: Record, logged: LoggedOperation | None) -> BundleRefused | None:
    where = f"record of {record.operation_id}"
    if not record.found:
        first = None if logged is None else min(logged.leaves)
        return BundleRefused("record", where, "the orchestrator has no record of an operation the log holds", first)
    decided = record.decision in ("APPROVE", "DECLINE")
    leaf = None if logged is None else logged.decision
    if logged is None or leaf is None:
        if decided:
            reason = (
                f"the orchestrator records {record.decision} by {record.reviewer!r}, but no decision leaf of it is in "
                "the bundle (decided after the checkpoint: export again once a later one covers it)"
            )
            return BundleRefused("record", where, reason)
        return None
    index = logged.decision_index
    if (record.decision, record.reviewer) != (leaf.decision, leaf.principal):
        now = f"{record.decision} by {record.reviewer!r}" if decided else "no decision"
        reason = f"the orchestrator now records {now}, the leaf {leaf.decision} by {leaf.principal!r}"
        return BundleRefused("leaf", f"leaf {index}", reason, index)
    receipts = logged_receipts(logged)
    if receipts and record.receipt_id not in receipts.values():
        recorded = f"receipt {record.receipt_id!r}" if record.receipt_id else "no receipt"
        logged_at = ", ".join(f"{receipt!r} (leaf {i})" for i, receipt in receipts.items())
        reason = f"the orchestrator records {recorded}, the log {logged_at}"
        return BundleRefused("record", where, reason, min(receipts))
    return None


def _one_to_one(records: Iterable[Record], named: Sequence[OperationId], history: History) -> list[BundleRefused]:
    """A finding for each record missing, given twice, or of an operation the leaves do not name."""
    given = Counter(record.operation_id for record in records)
    findings = []

    def first_leaf(operation_id: str) -> int | None:
        logged = history.operations.get(OperationId(operation_id))
        return None if logged is None else min(logged.leaves)

    for operation_id in named:
        if operation_id not in given:
            reason = "it is missing: the bundle's leaves name the operation, so its record must be there"
            findings.append(BundleRefused("record", f"record of {operation_id}", reason, first_leaf(operation_id)))
    wanted = set(named)
    for given_id, times in given.items():
        where = f"record of {given_id}"
        if given_id not in wanted:
            reason = "the bundle's leaves name no such operation: each record is of an operation of its scope"
            findings.append(BundleRefused("record", where, reason))
        elif times > 1:
            reason = f"it is given {times} times: the bundle holds one record per operation"
            findings.append(BundleRefused("record", where, reason, first_leaf(given_id)))
    return findings


def check_records(records: tuple[Record, ...], scope_operation: str | None, history: History) -> int:
    """Return how many records agree with the leaves read; raise the first finding in the log's order."""
    named = list(history.operations)
    if scope_operation is not None and OperationId(scope_operation) not in history.operations:
        named.insert(0, OperationId(scope_operation))
    findings = _one_to_one(records, named, history)
    findings += [
        finding
        for record in records
        if (finding := _finding(record, history.operations.get(OperationId(record.operation_id)))) is not None
    ]
    if findings:
        # The first in the log's order; a record no leaf answers comes after those that name one.
        raise min(findings, key=lambda f: (f.index is None, f.index or 0))
    return len(records)

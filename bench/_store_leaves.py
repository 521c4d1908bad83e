"""The audit leaves' cost in the store alone, in this process: the two writes of a first Approve (its decision
with the first attempt, then the receiver's receipt), with their leaves and without, in alternating rounds.

CPU is this process's (``time.process_time``), so the other processes on the machine move it far less than
they move the servers' figures. Without leaves, the two steps that make one are replaced for the round (the
same replacement as ``bench/_without_leaves.py``) and put back after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from decisionflow.identity import EvidenceItem, PolicyRef, identities
from decisionflow.vocabulary import CaseId, Decision, OperationId, Receipt
from decisionflow_server.storage import db
from orchestrator.audit_log import events
from orchestrator.domain import (
    FirstAttempt,
    PendingReview,
    Proposal,
    RecordedDecision,
    SealedCheckpoint,
    proposal_content,
)
from orchestrator.store import OrchestratorStore, _audit_entries

_POLICY = PolicyRef("support-replies", "2026-10", 9, {"max_refund_eur": "200"})
_EVIDENCE = (EvidenceItem("KB-12", 1, "Update to 4.2.1."),)
_NO_ENTRY = events.AuditEntry(b"", b"", "", OperationId(""), CaseId(""), datetime(2000, 1, 1, tzinfo=UTC))


@dataclass(frozen=True, slots=True)
class StoreCost:
    """CPU microseconds per first Approve's two store writes, each round's, with leaves and without."""

    with_leaves: tuple[float, ...]
    without_leaves: tuple[float, ...]


@contextmanager
def leaves_left_out() -> Iterator[None]:
    """Within: no audit entry is built (no encoding, no hash) and none is inserted, in this process (on
    PostgreSQL the store's statements are then those without an entry riding on them)."""
    built, inserted, riding = events.AuditEntry.of, _audit_entries.append_txn, _audit_entries.in_statement

    def no_entry(cls: type[events.AuditEntry], leaf: object, kind: str, case_id: CaseId) -> events.AuditEntry:
        return _NO_ENTRY

    def no_insert(conn: object, *entries: events.AuditEntry) -> None:
        return None

    def not_in_statement(conn: object) -> bool:
        return False

    events.AuditEntry.of = classmethod(no_entry)  # type: ignore[method-assign, assignment]
    _audit_entries.append_txn = no_insert
    _audit_entries.in_statement = not_in_statement
    try:
        yield
    finally:
        events.AuditEntry.of = built  # type: ignore[method-assign]
        _audit_entries.append_txn = inserted
        _audit_entries.in_statement = riding


def _started(store: OrchestratorStore, tag: str, at: datetime) -> Proposal:
    case_id = CaseId(f"S-{tag}")
    content = proposal_content(case_id, "record_support_review", f"Please update ({tag}).", _EVIDENCE, _POLICY)
    ids = identities(content.case_id, content.action, content.body, content.evidence, content.policy)
    author = "alex@example.com"
    proposal = Proposal(ids.operation_id, content, ids.evidence_id, ids.policy_id, False, None, author, at, frozenset())
    checkpoint = f"cp-{tag}"
    review = PendingReview(ids.operation_id, "decisionflow.review", "1", "graph", checkpoint, at)
    sealed = SealedCheckpoint(checkpoint, "decisionflow.review", "graph", ids.operation_id, at, "k", "0" * 64, b"s")
    stored, _ = store.create_proposal(proposal, review, [sealed])
    return stored


def _approve(store: OrchestratorStore, proposal: Proposal, at: datetime) -> None:
    op = proposal.operation_id
    decided = RecordedDecision(op, Decision.APPROVE, "rita@example.com", at)
    sealed = SealedCheckpoint(f"cp-d-{op[-16:]}", "decisionflow.review", "graph", op, at, "k", "0" * 64, b"s" * 64)
    attempt = FirstAttempt(b"payload " + op.encode(), "0" * 64, at + timedelta(seconds=30), "bench:1:i")
    store.record_decision(decided, proposal.case_id, [sealed], attempt)
    store.record_receipt(op, Receipt(f"rcpt-{op[-16:]}", op, at), at)


def measure(url: str, rounds: int, calls: int, progress: Callable[[str], None]) -> StoreCost:
    """Run rounds of calls first-Approve writes with leaves and without (alternating which goes first) on the
    migrated orchestrator database at url; return each round's CPU µs per first Approve of each."""
    engine = db.create_engine(url)
    store = OrchestratorStore(engine)
    with_leaves: list[float] = []
    without_leaves: list[float] = []
    try:
        for number in range(rounds):
            progress(f"store writes in process, round {number + 1}/{rounds}: {calls} first Approves each way")
            for leaves in (True, False) if number % 2 == 0 else (False, True):
                at = datetime.now(UTC)
                proposals = [_started(store, f"{number}-{leaves}-{i}-{at.timestamp()}", at) for i in range(calls)]
                with nullcontext() if leaves else leaves_left_out():
                    started = time.process_time()
                    for proposal in proposals:
                        _approve(store, proposal, at)
                    cpu = time.process_time() - started
                (with_leaves if leaves else without_leaves).append(1e6 * cpu / calls)
    finally:
        engine.dispose()
    return StoreCost(tuple(with_leaves), tuple(without_leaves))

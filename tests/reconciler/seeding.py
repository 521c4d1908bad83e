"""Seeding thousands of open operations fast, for the reconciler's volume tests.

What is seeded, and how it matches what the services write themselves:

- orchestrator rows (proposals, cases, decisions, operations) are inserted with the
  orchestrator's own tables in one transaction. Each proposal has a real identity
  (``decisionflow.identity``), an APPROVE decision, and -- for UNKNOWN operations -- one
  recorded attempt whose payload is ``orchestrator.domain.effect_payload``, the bytes the
  commit step would have sent;
- receiver rows (effects and support review records) are inserted with the receiver's own
  tables, carrying that same payload and digest, as a committed Apply whose reply was lost
  would have left them.

Nothing else is faked: the reconciler then talks to real servers over gRPC.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from decisionflow import db
from decisionflow.identity import EvidenceItem, PolicyRef, identities
from effect_receiver import schema as receiver_schema
from effect_receiver.store import migrate as migrate_receiver
from orchestrator import schema as orchestrator_schema
from orchestrator.domain import (
    Decision,
    Proposal,
    ProposalContent,
    RecordedDecision,
    State,
    effect_payload,
    evidence_to_json,
    policy_to_json,
)
from orchestrator.store import migrate as migrate_orchestrator

ACTION = "record_support_review"
REVIEWER = "rita@example.com"
AUTHOR = "alex@example.com"
POLICY = PolicyRef("support-replies", "2026-10", 9, {})


@dataclass(frozen=True, slots=True)
class SeededOperation:
    """One seeded operation: its ids, the payload its attempt carried, and its decision time."""

    operation_id: str
    case_id: str
    body: str
    payload: bytes
    payload_digest: str
    decided_at: datetime


def seed_operations(
    orchestrator_url: str,
    count: int,
    *,
    state: State = State.UNKNOWN,
    decided_at: datetime | None = None,
    first_attempt_at: datetime | None = None,
    case_prefix: str | None = None,
) -> list[SeededOperation]:
    """Insert count decided operations in state (UNKNOWN: one attempt recorded; APPROVED: none).

    The i-th operation is decided (and attempted) i milliseconds after the first, the last at
    decided_at (default: a minute ago), as a stream of approvals would leave them.
    """
    assert state in (State.UNKNOWN, State.APPROVED)
    last_decided = decided_at or datetime.now(UTC) - timedelta(minutes=1)
    last_attempt = first_attempt_at or last_decided
    prefix = case_prefix or "R-" + uuid.uuid4().hex[:8]
    evidence = (EvidenceItem("KB-12", 1, "Update to 4.2.1."),)
    seeded: list[SeededOperation] = []
    proposals, cases, decisions, operations = [], [], [], []
    for i in range(count):
        earlier = timedelta(milliseconds=count - 1 - i)
        decided_at, attempt_at = last_decided - earlier, last_attempt - earlier
        case_id = f"{prefix}-{i}"
        body = f"Known firmware issue; please update to 4.2.1 (reply {i})."
        ids = identities(case_id, ACTION, body, evidence, POLICY)
        proposal = Proposal(
            ids.operation_id,
            ProposalContent(case_id, ACTION, body, evidence, POLICY),
            ids.evidence_id,
            ids.policy_id,
            False,
            None,
            AUTHOR,
            decided_at - timedelta(minutes=5),
        )
        decision = RecordedDecision(ids.operation_id, Decision.APPROVE, REVIEWER, decided_at)
        payload, digest = effect_payload(proposal, decision)
        seeded.append(SeededOperation(ids.operation_id, case_id, body, payload, digest, decided_at))
        proposals.append(
            {
                "operation_id": ids.operation_id,
                "case_id": case_id,
                "action": ACTION,
                "body": body,
                "evidence_json": evidence_to_json(evidence),
                "evidence_id": ids.evidence_id,
                "policy_json": policy_to_json(POLICY),
                "policy_id": ids.policy_id,
                "human_edited": False,
                "parent_operation_id": None,
                "created_by": AUTHOR,
                "created_at": proposal.created_at,
            }
        )
        cases.append({"case_id": case_id, "current_operation_id": ids.operation_id, "updated_at": decided_at})
        decisions.append(
            {"operation_id": ids.operation_id, "decision": "approve", "reviewer": REVIEWER, "decided_at": decided_at}
        )
        attempted = state is State.UNKNOWN
        operations.append(
            {
                "operation_id": ids.operation_id,
                "case_id": case_id,
                "state": state.value,
                "state_changed_at": attempt_at if attempted else decided_at,
                "attempts": 1 if attempted else 0,
                "first_attempt_at": attempt_at if attempted else None,
                "last_attempt_at": attempt_at if attempted else None,
                "payload": payload if attempted else None,
                "payload_digest": digest if attempted else None,
            }
        )
    engine = db.create_engine(orchestrator_url, pool_size=1)
    try:
        migrate_orchestrator(engine)
        with engine.begin() as conn:
            conn.execute(orchestrator_schema.proposals.insert(), proposals)
            conn.execute(orchestrator_schema.cases.insert(), cases)
            conn.execute(orchestrator_schema.decisions.insert(), decisions)
            conn.execute(orchestrator_schema.operations.insert(), operations)
    finally:
        engine.dispose()
    return seeded


def seed_effects(receiver_url: str, seeded: Sequence[SeededOperation]) -> dict[str, str]:
    """Insert the effect of each seeded operation at the receiver; return receipt ids by operation id."""
    applied_at = datetime.now(UTC)
    receipts = {s.operation_id: "rcpt-" + uuid.uuid4().hex for s in seeded}
    engine = db.create_engine(receiver_url, pool_size=1)
    try:
        migrate_receiver(engine)
        with engine.begin() as conn:
            conn.execute(
                receiver_schema.effects.insert(),
                [
                    {
                        "operation_id": s.operation_id,
                        "case_id": s.case_id,
                        "kind": ACTION,
                        "payload": s.payload,
                        "payload_digest": s.payload_digest,
                        "receipt_id": receipts[s.operation_id],
                        "applied_at": applied_at,
                    }
                    for s in seeded
                ],
            )
            conn.execute(
                receiver_schema.support_review_records.insert(),
                [
                    {
                        "operation_id": s.operation_id,
                        "case_id": s.case_id,
                        "body": s.body,
                        "reviewer": REVIEWER,
                        "decided_at": s.decided_at,
                    }
                    for s in seeded
                ],
            )
    finally:
        engine.dispose()
    return receipts

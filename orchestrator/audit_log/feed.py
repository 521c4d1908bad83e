"""The event feed's terms (docs/events.md): an event is a sequenced leaf of the audit log with what it says
decoded (kind, ids, action, the state it leaves the operation in, who made it, when), a filter over
events, and the feed's settings. Pure: the store reads ``StoredEvent``, ``decoded`` reads the leaf once
per event for every watcher of a process."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from decisionflow.transparency import (
    DecisionLeaf,
    EscalationLeaf,
    ExpiryLeaf,
    Leaf,
    ProposalLeaf,
    RejectionLeaf,
    RerouteLeaf,
    SettlementLeaf,
    VoteLeaf,
    decode_leaf,
)
from decisionflow.vocabulary import CaseId, Decision, OperationId, OperationState


class EventKind(enum.Enum):
    """What a leaf records; the value is the audit entry's kind (and the proto's EVENT_KIND_ name, upper case)."""

    PROPOSAL = "proposal"
    DECISION = "decision"
    EFFECT = "effect"
    REJECTION = "rejection"
    SETTLEMENT = "settlement"
    EXPIRY = "expiry"
    VOTE = "vote"
    ESCALATION = "escalation"
    REROUTE = "reroute"


@dataclass(frozen=True, slots=True)
class FeedSettings:
    """The event feed's settings (the ``--events-*`` settings, orchestrator.config)."""

    poll_seconds: float
    """While a stream is open, how often the feed sequences new entries and reads them."""
    heartbeat_seconds: float
    """A stream with nothing to send sends its position this often."""
    streams_per_principal: int
    """Streams one principal may hold open in this process."""
    stall_seconds: float
    """A stream whose caller has not taken the next message for this long is closed (resumable)."""


DEFAULT_FEED = FeedSettings(poll_seconds=0.1, heartbeat_seconds=5.0, streams_per_principal=64, stall_seconds=30.0)


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A sequenced leaf as the store reads it: index, bytes, the entry's kind and ids, and its operation's action."""

    index: int
    data: bytes
    kind: str
    operation_id: OperationId
    case_id: CaseId
    action: str


@dataclass(frozen=True, slots=True)
class Event:
    """One event of the feed: the leaf and what it says."""

    index: int
    data: bytes
    kind: EventKind
    case_id: CaseId
    operation_id: OperationId
    action: str
    state: OperationState
    principal: str
    occurred_at: datetime
    decision: Decision


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a watcher wants: every field that is set must match (kinds empty: every kind)."""

    case_id: CaseId | None = None
    operation_id: OperationId | None = None
    action: str | None = None
    kinds: frozenset[EventKind] = frozenset()

    def matches(self, event: Event) -> bool:
        """Whether event passes every filter that is set."""
        return (
            (self.case_id is None or event.case_id == self.case_id)
            and (self.operation_id is None or event.operation_id == self.operation_id)
            and (self.action is None or event.action == self.action)
            and (not self.kinds or event.kind in self.kinds)
        )


def _state_and_who(leaf: Leaf) -> tuple[OperationState, str, Decision]:
    pending = OperationState.PENDING_REVIEW
    if isinstance(leaf, ProposalLeaf):
        return pending, leaf.principal, Decision.UNSPECIFIED
    if isinstance(leaf, DecisionLeaf):
        decision = Decision.parse(leaf.decision)
        state = OperationState.APPROVED if decision is Decision.APPROVE else OperationState.DECLINED
        return state, leaf.principal, decision
    if isinstance(leaf, RejectionLeaf):
        return OperationState.REJECTED, "", Decision.UNSPECIFIED
    if isinstance(leaf, SettlementLeaf):
        return OperationState(leaf.state), leaf.principal, Decision.UNSPECIFIED
    if isinstance(leaf, ExpiryLeaf):
        return OperationState.EXPIRED, "", Decision.UNSPECIFIED
    if isinstance(leaf, VoteLeaf):
        return pending, leaf.principal, Decision.parse(leaf.decision)
    if isinstance(leaf, EscalationLeaf | RerouteLeaf):
        return pending, "", Decision.UNSPECIFIED
    return OperationState.COMMITTED, "", Decision.UNSPECIFIED  # an EffectLeaf


def decoded(stored: StoredEvent) -> Event:
    """The event stored is (its leaf decoded: the store wrote it, so a MalformedLeaf here is a fault)."""
    leaf = decode_leaf(stored.data)
    state, principal, decision = _state_and_who(leaf)
    action = stored.action or (leaf.action if isinstance(leaf, ProposalLeaf | RerouteLeaf) else "")
    return Event(
        stored.index,
        stored.data,
        EventKind(stored.kind),
        stored.case_id,
        stored.operation_id,
        action,
        state,
        principal,
        leaf.recorded_at,
        decision,
    )

"""The audit log's entries: one leaf per event that changes what a case means (docs/audit-log.md, "Leaves").

A leaf is a list of text fields framed as identities frame theirs (docs/identities.md: each field's
UTF-8 bytes after line-ending normalisation, prefixed by its 4-byte big-endian length):

    "decisionflow.audit.leaf.v1", kind, recorded_at, then the kind's fields in the order below

``recorded_at`` is UTC, RFC 3339 with microseconds (``2026-12-04T08:30:00.123456Z``). Kinds:

    proposal    event (started|edited|replaced), principal, case_id, operation_id,
                previous_operation_id ("" for started), action, body,
                number of sources, then source_id, version, quotation for each (sorted by source_id as framed),
                policy name, version_label, allowance_units, number of rules, then key, value for each
                (sorted by key as framed), then, only when the review follows a rule other than its
                action's default rule, that rule's fields (decisionflow.review_rules.rule_fields, its
                domain first)
    decision    operation_id, decision (APPROVE|DECLINE), principal (the reviewer)
    effect      operation_id, receipt_id, applied_at ("" when the receiver left it out)
    rejection   operation_id, reason (the receiver refused the effect for good)
    settlement  operation_id, state (the state a lookup settled it to), principal (who settled it),
                receipt_id, applied_at ("" when the receiver left it out): the receipt the lookup found
    expiry      operation_id (an abandoned review, moved to EXPIRED)
    vote        operation_id, decision (APPROVE|DECLINE), principal, stage index, number of groups,
                then the groups the principal held when voting (code point order, each once): one
                vote of a review under a rule other than the default rule
    escalation  operation_id, stage index, number of groups (at least 1), then the groups the stage
                escalates to (code point order, each once): a stage due and escalated by the
                orchestrator's periodic job, whose escalate_to groups may decide it from then on
    reroute     operation_id, action, then, only when the review now follows a rule other than its
                action's default rule, that rule's fields (as in a proposal leaf): an operator moved a
                pending review on which nothing was decided yet (no vote, no escalation) to the rule
                in force, which it follows from then on

A proposal leaf carries the whole content its operation id is computed from, so an auditor
recomputes the id from the leaf alone (``check_proposal``) and never trusts the id written beside
it; and the review rule in force when it started, so an auditor checks the quorum offline. A leaf
without rule fields means the default rule: every leaf written before rules existed stays valid,
and the default rule is never written out (one rule, one way to write it). Decoding refuses
anything another encoder would not have written: an unknown version or kind, a field count that
does not match, bytes left over, a non-canonical number, after the policy anything but one valid
rule of the proposal's action other than its default rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from decisionflow.identity import EvidenceItem, PolicyRef, frame, normalise
from decisionflow.review_rules import ReviewRule, default_rule, rule_fields
from decisionflow.transparency._errors import TransparencyError
from decisionflow.vocabulary import CaseId, OperationId

LEAF_DOMAIN = "decisionflow.audit.leaf.v1"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
PROPOSAL_EVENTS = ("started", "edited", "replaced")


class MalformedLeaf(TransparencyError):
    """The bytes are not a leaf of this log, or a proposal leaf's content does not yield its operation id."""


@dataclass(frozen=True, slots=True)
class ProposalLeaf:
    """A proposal started, edited or replaced, with all the content its operation id is computed from."""

    recorded_at: datetime
    event: str
    principal: str
    case_id: CaseId
    operation_id: OperationId
    previous_operation_id: OperationId | None
    action: str
    body: str
    evidence: tuple[EvidenceItem, ...]
    policy: PolicyRef
    rule: ReviewRule | None = None
    """The review rule the review follows; None: its action's default rule (docs/review-rules.md)."""

    def review_rule(self) -> ReviewRule:
        """Return the rule the review follows: the one the leaf carries, else the action's default rule."""
        return default_rule(self.action) if self.rule is None else self.rule


@dataclass(frozen=True, slots=True)
class DecisionLeaf:
    """A reviewer's decision on one operation."""

    recorded_at: datetime
    operation_id: OperationId
    decision: str
    principal: str


@dataclass(frozen=True, slots=True)
class EffectLeaf:
    """The receiver's receipt: the effect of the operation was written."""

    recorded_at: datetime
    operation_id: OperationId
    receipt_id: str
    applied_at: datetime | None


@dataclass(frozen=True, slots=True)
class RejectionLeaf:
    """The receiver refused the operation's effect for good."""

    recorded_at: datetime
    operation_id: OperationId
    reason: str


@dataclass(frozen=True, slots=True)
class SettlementLeaf:
    """A lookup settled an open operation to a final state: the receiver's receipt it found, and who settled it
    (the reconciler or an operator)."""

    recorded_at: datetime
    operation_id: OperationId
    state: str
    principal: str
    receipt_id: str
    applied_at: datetime | None


@dataclass(frozen=True, slots=True)
class ExpiryLeaf:
    """An abandoned review moved to EXPIRED."""

    recorded_at: datetime
    operation_id: OperationId


@dataclass(frozen=True, slots=True)
class VoteLeaf:
    """One vote of a review under a rule other than the default rule: the stage it was counted in, and the
    groups its principal held then (code point order), by which its eligibility was decided."""

    recorded_at: datetime
    operation_id: OperationId
    decision: str
    principal: str
    stage_index: int
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EscalationLeaf:
    """A stage of a review under a rule, due and escalated: the groups it escalates to (code point order)
    may decide it from then on."""

    recorded_at: datetime
    operation_id: OperationId
    stage_index: int
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RerouteLeaf:
    """A pending review moved by an operator to the rule in force for its action (None: the default rule)."""

    recorded_at: datetime
    operation_id: OperationId
    action: str
    rule: ReviewRule | None

    def review_rule(self) -> ReviewRule:
        """Return the rule the review follows from this leaf on."""
        return default_rule(self.action) if self.rule is None else self.rule


Leaf = (
    ProposalLeaf
    | DecisionLeaf
    | EffectLeaf
    | RejectionLeaf
    | SettlementLeaf
    | ExpiryLeaf
    | VoteLeaf
    | EscalationLeaf
    | RerouteLeaf
)
VOTE_DECISIONS = ("APPROVE", "DECLINE")


def format_time(moment: datetime) -> str:
    """Return moment as the leaf writes it: UTC, RFC 3339, six fraction digits, ``Z``."""
    if moment.tzinfo is None:
        raise ValueError("a leaf's time must be timezone-aware")
    return moment.astimezone(UTC).strftime(TIME_FORMAT)


def _fields(leaf: Leaf) -> list[str]:
    match leaf:
        case ProposalLeaf():
            return _proposal_fields(leaf)
        case DecisionLeaf():
            return ["decision", leaf.operation_id, leaf.decision, leaf.principal]
        case EffectLeaf():
            applied = "" if leaf.applied_at is None else format_time(leaf.applied_at)
            return ["effect", leaf.operation_id, leaf.receipt_id, applied]
        case RejectionLeaf():
            return ["rejection", leaf.operation_id, leaf.reason]
        case SettlementLeaf():
            applied = "" if leaf.applied_at is None else format_time(leaf.applied_at)
            return ["settlement", leaf.operation_id, leaf.state, leaf.principal, leaf.receipt_id, applied]
        case ExpiryLeaf():
            return ["expiry", leaf.operation_id]
        case VoteLeaf():
            return _vote_fields(leaf)
        case EscalationLeaf():
            return _escalation_fields(leaf)
        case RerouteLeaf():
            return ["reroute", leaf.operation_id, leaf.action, *_rule_fields(leaf.action, leaf.rule)]


def _vote_fields(leaf: VoteLeaf) -> list[str]:
    if leaf.decision not in VOTE_DECISIONS:
        raise ValueError(f"a vote approves or declines, not {leaf.decision!r}")
    if leaf.stage_index < 0:
        raise ValueError(f"stage index {leaf.stage_index} is negative")
    if list(leaf.groups) != sorted(set(leaf.groups)):
        raise ValueError("a vote's groups are written in code point order, each once")
    fields = ["vote", leaf.operation_id, leaf.decision, leaf.principal, str(leaf.stage_index)]
    return [*fields, str(len(leaf.groups)), *leaf.groups]


def _escalation_fields(leaf: EscalationLeaf) -> list[str]:
    if leaf.stage_index < 0:
        raise ValueError(f"stage index {leaf.stage_index} is negative")
    if not leaf.groups or list(leaf.groups) != sorted(set(leaf.groups)):
        raise ValueError("an escalation's groups are at least one, written in code point order, each once")
    return ["escalation", leaf.operation_id, str(leaf.stage_index), str(len(leaf.groups)), *leaf.groups]


def _proposal_fields(leaf: ProposalLeaf) -> list[str]:
    if leaf.event not in PROPOSAL_EVENTS:
        raise ValueError(f"proposal event {leaf.event!r} is not one of {', '.join(PROPOSAL_EVENTS)}")
    fields = ["proposal", leaf.event, leaf.principal, leaf.case_id, leaf.operation_id]
    fields += [leaf.previous_operation_id or "", leaf.action, leaf.body, str(len(leaf.evidence))]
    for item in sorted(leaf.evidence, key=lambda item: normalise(item.source_id)):
        fields += [item.source_id, str(item.version), item.quotation]
    policy = leaf.policy
    fields += [policy.name, policy.version_label, str(policy.allowance_units), str(len(policy.rules))]
    for key in sorted(policy.rules, key=normalise):
        fields += [key, policy.rules[key]]
    return fields + _rule_fields(leaf.action, leaf.rule)


def _rule_fields(action: str, rule: ReviewRule | None) -> list[str]:
    """The fields of the rule a review of action follows: none for the default rule."""
    if rule is None:
        return []
    if rule.action != action:
        raise ValueError(f"the rule of {rule.action!r} cannot be the rule of a review of {action!r}")
    if rule == default_rule(action):
        raise ValueError("the default rule is written as no rule at all (rule=None)")
    return rule_fields(rule)


def encode_leaf(leaf: Leaf) -> bytes:
    """Return the leaf's canonical bytes: what the log hashes and what an auditor decodes."""
    kind, *rest = _fields(leaf)
    return frame([LEAF_DOMAIN, kind, format_time(leaf.recorded_at), *rest])

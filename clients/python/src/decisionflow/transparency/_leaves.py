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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from decisionflow.identity import EvidenceItem, IdentityError, PolicyRef, frame, identities, normalise, unframe
from decisionflow.review_rules import MalformedRule, ReviewRule, default_rule, rule_fields, rule_from_fields
from decisionflow.transparency._errors import TransparencyError
from decisionflow.vocabulary import CaseId, OperationId

LEAF_DOMAIN = "decisionflow.audit.leaf.v1"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
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


Leaf = (
    ProposalLeaf | DecisionLeaf | EffectLeaf | RejectionLeaf | SettlementLeaf | ExpiryLeaf | VoteLeaf | EscalationLeaf
)
VOTE_DECISIONS = ("APPROVE", "DECLINE")


def format_time(moment: datetime) -> str:
    """Return moment as the leaf writes it: UTC, RFC 3339, six fraction digits, ``Z``."""
    if moment.tzinfo is None:
        raise ValueError("a leaf's time must be timezone-aware")
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


def _parse_time(text: str) -> datetime:
    try:
        moment = datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError as exc:
        raise MalformedLeaf(f"time {text!r} is not RFC 3339 UTC with microseconds") from exc
    if format_time(moment) != text:
        raise MalformedLeaf(f"time {text!r} is not written canonically")
    return moment


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
    if leaf.rule is not None:
        if leaf.rule.action != leaf.action:
            raise ValueError(f"the rule of {leaf.rule.action!r} cannot be the rule of a proposal of {leaf.action!r}")
        if leaf.rule == default_rule(leaf.action):
            raise ValueError("the default rule is written as no rule at all (rule=None)")
        fields += rule_fields(leaf.rule)
    return fields


def encode_leaf(leaf: Leaf) -> bytes:
    """Return the leaf's canonical bytes: what the log hashes and what an auditor decodes."""
    kind, *rest = _fields(leaf)
    return frame([LEAF_DOMAIN, kind, format_time(leaf.recorded_at), *rest])


class _Fields:
    """The fields after the kind, taken in order; running out or leaving some over is refused."""

    def __init__(self, fields: Sequence[str]) -> None:
        self._rest: Iterator[str] = iter(fields)
        self._count = len(fields)

    def take(self) -> str:
        try:
            return next(self._rest)
        except StopIteration:
            raise MalformedLeaf("the leaf has fewer fields than its kind calls for") from None

    def number(self) -> int:
        text = self.take()
        if not text.isascii() or not text.isdigit() or str(int(text)) != text:
            raise MalformedLeaf(f"{text!r} is not a canonical non-negative decimal")
        return int(text)

    def left(self) -> list[str]:
        """Take every field not taken yet."""
        return list(self._rest)

    def done(self) -> None:
        if next(self._rest, None) is not None:
            raise MalformedLeaf("the leaf has more fields than its kind calls for")


def decode_leaf(data: bytes) -> Leaf:
    """Return the leaf data encodes; MalformedLeaf when it is not exactly what ``encode_leaf`` writes."""
    fields = unframe(data, MalformedLeaf)
    if len(fields) < 3 or fields[0] != LEAF_DOMAIN:
        raise MalformedLeaf(f"not a {LEAF_DOMAIN} leaf")
    kind, at, rest = fields[1], _parse_time(fields[2]), _Fields(fields[3:])
    leaf = _decode_kind(kind, at, rest)
    rest.done()
    if encode_leaf(leaf) != data:
        raise MalformedLeaf("the leaf is not written canonically (order or line endings)")
    return leaf


def _decode_kind(kind: str, at: datetime, rest: _Fields) -> Leaf:
    if kind == "proposal":
        return _decode_proposal(at, rest)
    if kind == "decision":
        return DecisionLeaf(at, OperationId(rest.take()), rest.take(), rest.take())
    if kind == "effect":
        operation_id, receipt_id, applied = OperationId(rest.take()), rest.take(), rest.take()
        return EffectLeaf(at, operation_id, receipt_id, _parse_time(applied) if applied else None)
    if kind == "rejection":
        return RejectionLeaf(at, OperationId(rest.take()), rest.take())
    if kind == "settlement":
        operation_id, state, principal, receipt_id = OperationId(rest.take()), rest.take(), rest.take(), rest.take()
        applied = rest.take()
        return SettlementLeaf(at, operation_id, state, principal, receipt_id, _parse_time(applied) if applied else None)
    if kind == "expiry":
        return ExpiryLeaf(at, OperationId(rest.take()))
    if kind == "vote":
        return _decode_vote(at, rest)
    if kind == "escalation":
        return _decode_escalation(at, rest)
    raise MalformedLeaf(f"unknown leaf kind {kind!r}")


def _decode_proposal(at: datetime, rest: _Fields) -> ProposalLeaf:
    event, principal, case_id, operation_id = rest.take(), rest.take(), CaseId(rest.take()), OperationId(rest.take())
    if event not in PROPOSAL_EVENTS:
        raise MalformedLeaf(f"unknown proposal event {event!r}")
    previous, action, body = rest.take(), rest.take(), rest.take()
    evidence = tuple(EvidenceItem(rest.take(), rest.number(), rest.take()) for _ in range(rest.number()))
    name, label, allowance = rest.take(), rest.take(), rest.number()
    rules = {rest.take(): rest.take() for _ in range(rest.number())}
    policy = PolicyRef(name, label, allowance, rules)
    previous_id = OperationId(previous) if previous else None
    rule = _decode_rule(action, rest.left())
    return ProposalLeaf(at, event, principal, case_id, operation_id, previous_id, action, body, evidence, policy, rule)


def _decode_rule(action: str, fields: list[str]) -> ReviewRule | None:
    """The rule in a proposal leaf's last fields (none: the default rule), refusing what no encoder writes."""
    if not fields:
        return None
    try:
        rule, end = rule_from_fields(fields)
    except MalformedRule as exc:
        raise MalformedLeaf(f"the proposal's review rule is malformed: {exc}") from exc
    if end != len(fields):
        raise MalformedLeaf("the leaf has more fields than its kind calls for")
    if rule.action != action:
        raise MalformedLeaf(f"the proposal of {action!r} carries the rule of {rule.action!r}")
    if rule == default_rule(action):
        raise MalformedLeaf("the proposal carries the default rule, which a leaf never writes out")
    return rule


def _decode_vote(at: datetime, rest: _Fields) -> VoteLeaf:
    operation_id, decision, principal, stage = OperationId(rest.take()), rest.take(), rest.take(), rest.number()
    if decision not in VOTE_DECISIONS:
        raise MalformedLeaf(f"vote {decision!r} is neither APPROVE nor DECLINE")
    groups = tuple(rest.take() for _ in range(rest.number()))
    if list(groups) != sorted(set(groups)):
        raise MalformedLeaf("a vote's groups are not in code point order, each once")
    return VoteLeaf(at, operation_id, decision, principal, stage, groups)


def _decode_escalation(at: datetime, rest: _Fields) -> EscalationLeaf:
    operation_id, stage = OperationId(rest.take()), rest.number()
    groups = tuple(rest.take() for _ in range(rest.number()))
    if not groups or list(groups) != sorted(set(groups)):
        raise MalformedLeaf("an escalation's groups are not at least one, in code point order, each once")
    return EscalationLeaf(at, operation_id, stage, groups)


def check_proposal(leaf: ProposalLeaf) -> None:
    """Raise MalformedLeaf unless the leaf's content yields exactly the operation id it names."""
    try:
        computed = identities(leaf.case_id, leaf.action, leaf.body, leaf.evidence, leaf.policy).operation_id
    except IdentityError as exc:
        raise MalformedLeaf(f"the proposal of {leaf.operation_id} has no identity: {exc}") from exc
    if computed != leaf.operation_id:
        raise MalformedLeaf(f"the proposal leaf names {leaf.operation_id} but its content yields {computed}")

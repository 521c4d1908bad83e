"""Decoding the audit log's leaves (decisionflow.transparency._leaves gives their fields): ``decode_leaf``
accepts exactly the bytes ``encode_leaf`` writes and refuses anything else, and ``check_proposal``
recomputes a proposal leaf's operation id from its content."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from decisionflow.identity import EvidenceItem, IdentityError, PolicyRef, identities, unframe
from decisionflow.review_rules import MalformedRule, ReviewRule, default_rule, rule_from_fields
from decisionflow.transparency._leaves import (
    LEAF_DOMAIN,
    PROPOSAL_EVENTS,
    TIME_FORMAT,
    VOTE_DECISIONS,
    DecisionLeaf,
    EffectLeaf,
    EscalationLeaf,
    ExpiryLeaf,
    Leaf,
    MalformedLeaf,
    ProposalLeaf,
    RejectionLeaf,
    RerouteLeaf,
    SettlementLeaf,
    VoteLeaf,
    encode_leaf,
    format_time,
)
from decisionflow.vocabulary import CaseId, OperationId


def _parse_time(text: str) -> datetime:
    try:
        moment = datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError as exc:
        raise MalformedLeaf(f"time {text!r} is not RFC 3339 UTC with microseconds") from exc
    if format_time(moment) != text:
        raise MalformedLeaf(f"time {text!r} is not written canonically")
    return moment


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
    if kind == "reroute":
        operation_id, action = OperationId(rest.take()), rest.take()
        return RerouteLeaf(at, operation_id, action, _decode_rule(action, rest.left()))
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
    """The rule in a leaf's last fields (none: the default rule), refusing what no encoder writes."""
    if not fields:
        return None
    try:
        rule, end = rule_from_fields(fields)
    except MalformedRule as exc:
        raise MalformedLeaf(f"the review rule is malformed: {exc}") from exc
    if end != len(fields):
        raise MalformedLeaf("the leaf has more fields than its kind calls for")
    if rule.action != action:
        raise MalformedLeaf(f"the review of {action!r} carries the rule of {rule.action!r}")
    if rule == default_rule(action):
        raise MalformedLeaf("the leaf carries the default rule, which a leaf never writes out")
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

"""What a run of the audit log's leaves must say, read in index order: the rules an auditor checks.

    every leaf          decodes canonically (decode_leaf)
    proposal            its content yields the operation id it names (check_proposal)
    any other leaf      names an operation whose proposal leaf came earlier
    decision            the operation's first and only decision: decisions never change; under a rule
                        other than the default one (the proposal leaf carries it, or the last
                        reroute leaf), an APPROVE completes the votes before it and a DECLINE follows
                        the vote that ended it
    vote                the rule admits it after the operation's votes before it (open review, before
                        the deadline, no author, no second vote, no counting in two stages unless the
                        rule allows, eligible groups) and it counts in the stage it names
    escalation          of the operation's current stage, due and not escalated yet at its time, to the
                        groups the stage escalates to
    reroute             of a review on which nothing was decided yet (no vote, no escalation), to a rule
                        of its proposal's action other than the one it follows; the review follows it
                        from then on (its times still count from the proposal's start)
    expiry              ends the review: no decision, vote, escalation, reroute or second expiry
                        after it; decision, vote, escalation and reroute never follow a decision
    effect, rejection,  follow an approval of the operation: only an approved operation's
    settlement          effect is written, refused or settled

The leaves read need not be the whole log (the leaves of one operation or of one case are enough),
but each operation's leaves must all be there: a decision whose proposal is left out is refused,
which is how a log rewritten to drop a proposal shows. A failure raises HistoryError naming the
first leaf, by index, that does not hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from decisionflow.review_rules import (
    Escalation,
    ReviewRecord,
    ReviewRule,
    ReviewStatus,
    Vote,
    review_progress,
    vote_effect,
)
from decisionflow.transparency._decoding import check_proposal, decode_leaf
from decisionflow.transparency._errors import TransparencyError
from decisionflow.transparency._leaves import (
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
)
from decisionflow.vocabulary import Decision, OperationId

DECISIONS = ("APPROVE", "DECLINE")


class HistoryError(TransparencyError):
    """The leaf at index does not decode, or does not fit the leaves before it; reason says why."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"leaf {index}: {reason}")
        self.index = index
        self.reason = reason


class NotProven(TransparencyError):
    """Every leaf holds, but together they do not show what was to be shown (a proposal, a decision)."""


@dataclass
class LoggedOperation:
    """One operation as the leaves read tell it: its proposal, its decision (if any) and every leaf, by index."""

    operation_id: OperationId
    proposal: ProposalLeaf
    decision: DecisionLeaf | None = None
    decision_index: int | None = None
    leaves: dict[int, Leaf] = field(default_factory=dict)
    authors: frozenset[str] = frozenset()
    """Who created the proposal, or one it was edited from or replaced, as far as the leaves read tell."""
    votes: list[Vote] = field(default_factory=list)
    escalations: list[Escalation] = field(default_factory=list)
    rerouted: RerouteLeaf | None = None
    """The last reroute leaf read: the review follows its rule, not the proposal leaf's."""
    expiry_index: int | None = None

    @property
    def rule(self) -> ReviewRule | None:
        """The rule the review follows as the leaves read tell: None for its action's default rule."""
        return self.proposal.rule if self.rerouted is None else self.rerouted.rule

    def record(self) -> ReviewRecord:
        """The review as its leaves record it: the rule it follows (its proposal leaf's, or the last reroute's),
        its authors, start, votes and escalations."""
        return ReviewRecord(
            (self.proposal if self.rerouted is None else self.rerouted).review_rule(),
            self.authors,
            self.proposal.recorded_at,
            tuple(self.votes),
            tuple(self.escalations),
        )

    @property
    def effects(self) -> tuple[EffectLeaf, ...]:
        """The receipts logged for the operation, in index order."""
        return tuple(leaf for _, leaf in sorted(self.leaves.items()) if isinstance(leaf, EffectLeaf))


class History:
    """Leaves read one at a time in index order, checked against the rules above."""

    def __init__(self) -> None:
        self.operations: dict[OperationId, LoggedOperation] = {}
        self.kinds: dict[str, int] = {}
        self._last: int | None = None

    def read(self, index: int, data: bytes) -> Leaf:
        """Check the leaf at index (after every leaf read before it); return it decoded."""
        if self._last is not None and index <= self._last:
            raise HistoryError(index, f"comes after leaf {self._last}: leaves are read in index order")
        self._last = index
        try:
            leaf = decode_leaf(data)
            if isinstance(leaf, ProposalLeaf):
                check_proposal(leaf)
        except MalformedLeaf as malformed:
            raise HistoryError(index, str(malformed)) from malformed
        self._admit(index, leaf)
        kind = type(leaf).__name__.removesuffix("Leaf").lower()
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        return leaf

    def _admit(self, index: int, leaf: Leaf) -> None:
        operation = self.operations.get(leaf.operation_id)
        if isinstance(leaf, ProposalLeaf):
            if operation is None:
                previous = (
                    None if leaf.previous_operation_id is None else self.operations.get(leaf.previous_operation_id)
                )
                authors = frozenset({leaf.principal}) | (frozenset() if previous is None else previous.authors)
                self.operations[leaf.operation_id] = LoggedOperation(
                    leaf.operation_id, leaf, leaves={index: leaf}, authors=authors
                )
            else:
                operation.leaves[index] = leaf
            return
        kind = type(leaf).__name__.removesuffix("Leaf").lower()
        if operation is None:
            raise HistoryError(index, f"a {kind} of {leaf.operation_id}, whose proposal is not among the leaves before")
        if isinstance(leaf, DecisionLeaf | VoteLeaf | EscalationLeaf | RerouteLeaf | ExpiryLeaf):
            _check_open(index, operation, kind)
        if isinstance(leaf, DecisionLeaf):
            if leaf.decision not in DECISIONS:
                raise HistoryError(index, f"decision {leaf.decision!r} is neither APPROVE nor DECLINE")
            if operation.decision is not None:
                raise HistoryError(
                    index, f"a second decision of {leaf.operation_id} (leaf {operation.decision_index} decided it)"
                )
            if operation.rule is not None:
                _check_quorum(index, operation, leaf)
            operation.decision, operation.decision_index = leaf, index
        elif isinstance(leaf, VoteLeaf):
            _admit_vote(index, operation, leaf)
        elif isinstance(leaf, EscalationLeaf):
            _admit_escalation(index, operation, leaf)
        elif isinstance(leaf, RerouteLeaf):
            _admit_reroute(index, operation, leaf)
        elif isinstance(leaf, EffectLeaf | RejectionLeaf | SettlementLeaf):
            if operation.decision is None or operation.decision.decision != "APPROVE":
                raise HistoryError(index, f"a {kind} of {leaf.operation_id}, which no leaf before approved")
        else:
            assert isinstance(leaf, ExpiryLeaf)
            operation.expiry_index = index
        operation.leaves[index] = leaf


def _check_open(index: int, operation: LoggedOperation, kind: str) -> None:
    """A review's leaves stop at its decision (a second decision is named as such) or its expiry."""
    if operation.decision is not None and kind != "decision":
        raise HistoryError(
            index, f"a {kind} of {operation.operation_id} after its decision (leaf {operation.decision_index})"
        )
    if operation.expiry_index is not None:
        raise HistoryError(
            index, f"a {kind} of {operation.operation_id} after its expiry (leaf {operation.expiry_index})"
        )


def _admit_reroute(index: int, operation: LoggedOperation, leaf: RerouteLeaf) -> None:
    """A reroute moves an untouched review of its proposal's action to another rule."""
    if leaf.action != operation.proposal.action:
        raise HistoryError(index, f"a reroute to a rule of {leaf.action!r}, not of {operation.proposal.action!r}")
    if operation.votes or operation.escalations:
        raise HistoryError(index, f"a reroute of {leaf.operation_id}, which has votes or an escalation already")
    if leaf.rule == operation.rule:
        raise HistoryError(index, f"a reroute of {leaf.operation_id} to the rule it already follows")
    operation.rerouted = leaf


def _admit_vote(index: int, operation: LoggedOperation, leaf: VoteLeaf) -> None:
    record = operation.record()
    vote = Vote(leaf.principal, Decision(leaf.decision), frozenset(leaf.groups), leaf.recorded_at)
    stage = len(review_progress(record, leaf.recorded_at).stages) - 1
    effect = vote_effect(record, vote)
    if effect.refusal is not None:
        raise HistoryError(index, f"a vote of {leaf.principal} the review's rule refuses: {effect.refusal.explanation}")
    if leaf.stage_index != stage:
        raise HistoryError(index, f"a vote counted in stage {stage} names stage {leaf.stage_index}")
    operation.votes.append(vote)


def _admit_escalation(index: int, operation: LoggedOperation, leaf: EscalationLeaf) -> None:
    """An escalation follows the rule: of the current stage, due then, escalating to the groups it names, once."""
    progress = review_progress(operation.record(), leaf.recorded_at)
    if leaf.stage_index != progress.stage_index or not progress.should_escalate:
        raise HistoryError(index, f"an escalation of stage {leaf.stage_index}, which was not due to escalate then")
    if leaf.groups != progress.current.stage.escalate_to:
        raise HistoryError(index, f"an escalation to {', '.join(leaf.groups)}, not to the groups its stage names")
    operation.escalations.append(Escalation(leaf.stage_index, leaf.recorded_at))


def _check_quorum(index: int, operation: LoggedOperation, leaf: DecisionLeaf) -> None:
    """Under a rule other than the default one a decision only follows the votes that made it."""
    status = review_progress(operation.record(), leaf.recorded_at).status
    if leaf.decision == "APPROVE" and status is not ReviewStatus.COMPLETE:
        raise HistoryError(index, f"an approval of {leaf.operation_id} whose votes before it do not complete its rule")
    if leaf.decision == "DECLINE" and status is not ReviewStatus.DECLINED:
        raise HistoryError(index, f"a decline of {leaf.operation_id} whose votes before it do not end its review")

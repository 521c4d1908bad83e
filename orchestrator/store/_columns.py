"""The shared vocabulary as the orchestrator's columns spell it: the one place the store converts.

The columns keep the text they have always held (existing databases): a state or a decision is
its lowercase label (``pending_review``, ``approve``); a failed lookup, which the vocabulary calls
UNSPECIFIED, is ``failed`` with consistency ``none``.
"""

from __future__ import annotations

from collections.abc import Iterable

from decisionflow.vocabulary import Consistency, Decision, LookupStatus, OperationState

_LOOKUP_TEXT = {
    LookupStatus.APPLIED: "applied",
    LookupStatus.NOT_FOUND: "not_found",
    LookupStatus.UNSPECIFIED: "failed",
}
_LOOKUP_OF = {text: status for status, text in _LOOKUP_TEXT.items()}
_CONSISTENCY_TEXT = {Consistency.STRONG: "strong", Consistency.EVENTUAL: "eventual", Consistency.UNSPECIFIED: "none"}
_CONSISTENCY_OF = {text: consistency for consistency, text in _CONSISTENCY_TEXT.items()}


def state_text(state: OperationState) -> str:
    """Return the column text of a stored state (SUPERSEDED and UNSPECIFIED are never stored)."""
    return state.label


def states_text(states: Iterable[OperationState]) -> list[str]:
    """Return the column texts of several states."""
    return [state.label for state in states]


def state_of(text: str) -> OperationState:
    """Return the state a column holds."""
    return OperationState(text.upper())


def decision_text(decision: Decision) -> str:
    """Return the column text of a recorded decision."""
    return decision.label


def decision_of(text: str) -> Decision:
    """Return the decision a column holds."""
    return Decision(text.upper())


def lookup_text(status: LookupStatus) -> str:
    """Return the column text of a lookup status."""
    return _LOOKUP_TEXT[status]


def lookup_of(text: str) -> LookupStatus:
    """Return the lookup status a column holds."""
    return _LOOKUP_OF[text]


def consistency_text(consistency: Consistency) -> str:
    """Return the column text of a lookup's consistency."""
    return _CONSISTENCY_TEXT[consistency]


def consistency_of(text: str) -> Consistency:
    """Return the consistency a column holds."""
    return _CONSISTENCY_OF[text]

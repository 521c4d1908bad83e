"""The console's one vocabulary: every code the orchestrator answers with, as a person reads it.

Every template says a state, an outcome, a decision or a lookup through the ``words`` filter, and the
audit trail says a leaf's decision and state through ``in_words``; the code itself stays in an
element's ``data-*`` attribute for scripts and tests. A code without words here is a defect a test
finds (each member of each vocabulary has its words), not a page that shows ``NOT_FOUND``.

    vocabulary      code              words
    OperationState  PENDING_REVIEW    Pending review
                    UNKNOWN           Unknown: the effect is not confirmed yet
    Outcome         COMMITTED         Approved and written
                    UNKNOWN           Approved, not confirmed yet
    Decision        UNSPECIFIED       not decided yet
                    APPROVE           approved
    LookupStatus    NOT_FOUND         not found
    Consistency     EVENTUAL          by a replica (it may lag)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from decisionflow.client import Consistency, Decision, LookupStatus, OperationState, Outcome

VOCABULARY: Mapping[type[enum.Enum], Mapping[str, str]] = MappingProxyType(
    {
        OperationState: {
            "UNSPECIFIED": "State not known to this console",
            "PENDING_REVIEW": "Pending review",
            "APPROVED": "Approved, effect not yet attempted",
            "UNKNOWN": "Unknown: the effect is not confirmed yet",
            "COMMITTED": "Committed",
            "DECLINED": "Declined",
            "REJECTED": "Rejected by the receiver",
            "SUPERSEDED": "Replaced by a newer proposal",
            "EXPIRED": "Expired undecided",
        },
        # What an Approve, a Decline or a re-drive achieved: the headline of the page that answers it.
        Outcome: {
            "COMMITTED": "Approved and written",
            "UNKNOWN": "Approved, not confirmed yet",
            "DECLINED": "Declined",
            "REJECTED": "Approved, refused by the receiver",
            "AWAITING_APPROVALS": "Your vote is recorded; the review needs more",
        },
        Decision: {
            "UNSPECIFIED": "not decided yet",
            "APPROVE": "approved",
            "DECLINE": "declined",
        },
        LookupStatus: {
            "UNSPECIFIED": "no answer",
            "APPLIED": "found written",
            "NOT_FOUND": "not found",
        },
        Consistency: {
            "UNSPECIFIED": "",
            "STRONG": "by the primary",
            "EVENTUAL": "by a replica (it may lag)",
        },
    }
)


def in_words(value: object) -> str:
    """Return a code of the vocabulary (an enum member) in words; any other value as its text."""
    if isinstance(value, enum.Enum):
        said = VOCABULARY.get(type(value), {}).get(str(value.value))
        if said is not None:
            return said
        return str(value.value).replace("_", " ").lower()
    return str(value)


def decision_in_words(code: str) -> str:
    """Return a decision as the audit log spells it (``APPROVE``) in words; an unknown spelling as it is."""
    decision = Decision.__members__.get(code.strip().upper())
    return code if decision is None else in_words(decision)


def state_in_words(code: str) -> str:
    """Return an operation state as the audit log spells it (``COMMITTED``) in words; an unknown one as it is."""
    state = OperationState.__members__.get(code.strip().upper())
    return code if state is None else in_words(state)

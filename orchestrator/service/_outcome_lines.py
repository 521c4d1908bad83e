"""The lines the decision service writes about an operation's outcome: the outcome noted on the
call's access line and span, and a line of its own when the outcome is not what the caller hoped."""

from __future__ import annotations

import logging

from decisionflow.vocabulary import Decision, Outcome
from decisionflow_server.runtime import tracing
from orchestrator.domain import Proposal
from orchestrator.ports import ReceiverRefusedCaller

logger = logging.getLogger("decisionflow.orchestrator")


def refused_caller(proposal: Proposal, refused: ReceiverRefusedCaller) -> str:
    """What is known after the receiver refused the orchestrator or could not be reached, and no more."""
    ended = f"the Apply of {proposal.operation_id} ended {refused.code} after {refused.attempts} attempt(s) ({refused})"
    if refused.may_have_written:
        return (
            f"{ended}: the effect may have been written (a reply lost after the receiver committed ends the "
            "same way); the outcome is Unknown until a lookup at the receiver settles it (a re-drive or the reconciler)"
        )
    return (
        f"{ended}: the receiver refused the orchestrator itself before any work, never the payload; "
        "the operation stays Unknown and open to a re-drive"
    )


def log_outcome(
    message: str, proposal: Proposal, principal: str, outcome: Outcome | Decision, *, code: str = ""
) -> None:
    """Note the outcome on the call's access line; log a line of its own at warning when the outcome is
    unknown, at error when the receiver refused the caller (code), and at info only outside a served call.

    Logs and spans carry the outcome's lowercase label ("committed", or the decision recorded), as they always have.
    """
    tracing.annotate(operation_id=proposal.operation_id, case_id=proposal.case_id, outcome=outcome.label)
    level = logging.ERROR if code else logging.WARNING if outcome is Outcome.UNKNOWN else logging.INFO
    if level == logging.INFO and tracing.in_served_call():
        return  # the access line says it: one line per call
    extra = {"operation_id": proposal.operation_id, "case_id": proposal.case_id, "principal": principal}
    logger.log(level, message, extra={**extra, "outcome": outcome.label, **({"code": code} if code else {})})

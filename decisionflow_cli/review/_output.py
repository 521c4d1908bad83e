"""What the review commands print: one JSON object on stdout, one human line on stderr, and the exit status."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import grpc

from decisionflow import reasons
from decisionflow.client import CaseHasOpenProposal, DecisionConflict, DecisionflowError, StaleProposal
from decisionflow_cli.command import CommandError

EXIT_DONE = 0
EXIT_ERROR = 1
EXIT_REFUSED = 3
# A re-drive the receiver refused for its key retention: the outcome stays unknown, an operator must escalate.
EXIT_ESCALATE = 4
EXIT_UNKNOWN = 42

EXIT_CODES_HELP = (
    "exit status: 0 done (a read, or outcome COMMITTED, DECLINED or AWAITING_APPROVALS: the vote counts and the "
    "review's rule needs more); 42 outcome Unknown (decision recorded, effect not confirmed: "
    "decisionflow-reconciler settles it); 3 refused (stale, conflict, invalid request, not found, permission "
    "denied, not eligible under the review's rule, unauthenticated, rejected by the receiver, expired, too many "
    "open reviews); "
    "1 error (unavailable or over the author's budget after retries, deadline, internal: the line on stderr "
    "says whether repeating can help); 2 bad usage or input"
)


def to_json(value: Any) -> Any:
    """Return value (views, enums, times, mappings) as plain JSON types."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value


def emit(document: Mapping[str, Any]) -> None:
    """Write document as one JSON line on stdout."""
    sys.stdout.write(json.dumps(to_json(document), ensure_ascii=False) + "\n")
    sys.stdout.flush()


def say(line: str) -> None:
    """Write the human summary line on stderr."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


# What the operator or reviewer should do, by ErrorInfo reason first (its declaration's advice,
# decisionflow.reasons.GUIDE), then by status code. Only a failure that may have acted, or that nothing
# was recorded for, is worth repeating; a definite refusal or a server fault is not fixed by sending the
# same request again.
_ADVICE_BY_REASON: Mapping[str, str] = {reason: guide.advice for reason, guide in reasons.GUIDE.items() if guide.advice}
_ADVICE_BY_CODE: Mapping[grpc.StatusCode, str] = {
    grpc.StatusCode.INVALID_ARGUMENT: "correct the request; repeating it unchanged will not help",
    grpc.StatusCode.NOT_FOUND: "check the id; repeating will not help",
    grpc.StatusCode.ALREADY_EXISTS: "the decision on record stands; repeating will not help",
    grpc.StatusCode.FAILED_PRECONDITION: "repeating will not help until the state changes",
    grpc.StatusCode.PERMISSION_DENIED: "the principal lacks a role this command needs; repeating will not help",
    grpc.StatusCode.UNAUTHENTICATED: "give a valid token (--token-file) or client certificate",
    grpc.StatusCode.DATA_LOSS: "stored data failed its integrity check; an operator must act; repeating will not help",
    grpc.StatusCode.INTERNAL: "a server fault, reported to its log; the call may have acted: check {subject} with "
    "decisionflow status before repeating, and tell an operator",
    grpc.StatusCode.UNKNOWN: "a server fault, reported to its log; the call may have acted: check {subject} with "
    "decisionflow status before repeating, and tell an operator",
    grpc.StatusCode.OUT_OF_RANGE: "correct the request; repeating it unchanged will not help",
    grpc.StatusCode.UNIMPLEMENTED: "the server does not offer this call (another version?); repeating will not help",
}
_RETRY_ADVICE = "the call may have acted: repeat it or check {subject} with decisionflow status"


def advice(error: DecisionflowError, subject: str) -> str:
    """Return what to do after error: repeat only when repeating can help, otherwise who must act."""
    text = _ADVICE_BY_REASON.get(error.reason) or _ADVICE_BY_CODE.get(error.code) or _RETRY_ADVICE
    return text.format(subject=subject)


def _refusal(error: DecisionflowError, subject: str) -> str:
    if isinstance(error, StaleProposal):
        current = error.current_operation_id or "unknown"
        return f"refused as stale: {subject} is not the case's current proposal (current: {current})"
    if isinstance(error, CaseHasOpenProposal):
        current = error.current_operation_id or "unknown"
        return (
            f"refused: {subject} has an undecided proposal {current}; decide or edit it, or start again with "
            f"--expected-operation-id {current} to replace it"
        )
    if isinstance(error, DecisionConflict):
        return f"refused as a conflict: {subject} is already decided {error.recorded_decision.value}"
    reason = f" {error.reason}" if error.reason and error.reason != error.code.name else ""
    detail = f": {error.message}" if error.message else ""
    violations = "".join(f"; {v.field}: {v.description}" for v in error.violations)
    return f"refused ({error.code.name}{reason}){detail}{violations}; {advice(error, subject)}"


def failed(
    command: str, error: DecisionflowError, subject: str, *, print_json: bool = True, **context: Any
) -> CommandError:
    """Print error as JSON (unless print_json is False) and return the CommandError that ends the command
    with its exit status."""
    # Only a definite refusal proves nothing changed; after an indeterminate attempt it proves nothing.
    exit_code = EXIT_REFUSED if error.definite else EXIT_ERROR
    if print_json:
        emit(
            {
                "command": command,
                **context,
                "error": {
                    "type": type(error).__name__,
                    "code": error.code.name,
                    "reason": error.reason,
                    "message": error.message,
                    "metadata": error.metadata,
                    "violations": [{"field": v.field, "description": v.description} for v in error.violations],
                    "definite": error.definite,
                    "attempts": error.attempts,
                },
                "exit_code": exit_code,
            }
        )
    if exit_code == EXIT_REFUSED:
        return CommandError(_refusal(error, subject), exit_code)
    reason = f" {error.reason}" if error.reason and error.reason != error.code.name else ""
    return CommandError(
        f"{error.code.name}{reason} after {error.attempts} attempt(s): {error.message or 'no detail'}; "
        f"{advice(error, subject)}",
        exit_code,
    )

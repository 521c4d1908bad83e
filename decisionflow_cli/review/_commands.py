"""The handlers of the review commands: read the input, make one call, print the result."""

from __future__ import annotations

import argparse
import json

from decisionflow.client import ApproveResult, DecisionflowError, Outcome, ReviewClient, Role
from decisionflow.identity import EvidenceItem, IdentityError, PolicyRef
from decisionflow_cli.command import CommandError
from decisionflow_cli.review._connection import read_input, review_client
from decisionflow_cli.review._output import EXIT_DONE, EXIT_REFUSED, EXIT_UNKNOWN, emit, failed, say
from decisionflow_cli.review._progress import described, progress_fields, waiting
from decisionflow_server.foundation.proposal_json import ProposalFormatError, load_json, proposal_from_json

_EDIT_FIELDS = ("body", "evidence", "policy")


def _state_of(reviews: ReviewClient, operation_id: str) -> str | None:
    try:
        return reviews.get_operation(operation_id).state.value
    except DecisionflowError:
        return None  # the write succeeded; only this extra read failed, so the command still succeeds


def run_start(args: argparse.Namespace) -> int:
    """Start a review of the proposal in args.file; exit 0, or 3/1 on refusal/error."""
    try:
        content = proposal_from_json(read_input(args.file))
    except IdentityError as exc:
        raise CommandError(str(exc)) from exc
    with review_client(args) as reviews:
        try:
            started = reviews.start_review(*content, expected_operation_id=args.expected_operation_id)
        except DecisionflowError as error:
            raise failed("start", error, f"case {content.case_id}", case_id=content.case_id) from error
        operation_id = started.proposal.operation_id
        state = _state_of(reviews, operation_id)
    emit(
        {
            "command": "start",
            "operation_id": operation_id,
            "case_id": started.proposal.case_id,
            "state": state,
            "created": started.created,
            "proposal": started.proposal,
            "pending_review": started.pending_review,
        }
    )
    verb = "started" if started.created else "already started (same content, same operation)"
    say(f"{verb}: case {started.proposal.case_id} operation {operation_id} ({state or 'state not read'})")
    return EXIT_DONE


def edit_from_json(text: str) -> tuple[str, tuple[EvidenceItem, ...], PolicyRef]:
    """Parse edit JSON {body, evidence, policy} as strictly as a proposal; return (body, evidence, policy)."""

    document = load_json(text)
    if not isinstance(document, dict):
        raise ProposalFormatError("edit: must be an object with body, evidence and policy")
    unknown = [key for key in document if key not in _EDIT_FIELDS]
    if unknown:
        raise ProposalFormatError(f"edit: unknown field {unknown[0]!r}")
    missing = [name for name in _EDIT_FIELDS if name not in document]
    if missing:
        raise ProposalFormatError(f"edit: missing field {missing[0]!r}")
    # The proposal reader checks every nested field; the case and action are the edited proposal's.
    content = proposal_from_json(json.dumps({"case_id": "", "action": "", **document}))
    return content.body, content.evidence, content.policy


def run_edit(args: argparse.Namespace) -> int:
    """Replace the case's current proposal if args.expected_operation_id is still current."""
    try:
        body, evidence, policy = edit_from_json(read_input(args.file))
    except IdentityError as exc:
        raise CommandError(str(exc)) from exc
    expected = args.expected_operation_id
    with review_client(args) as reviews:
        try:
            edited = reviews.edit_proposal(expected, body, evidence, policy)
        except DecisionflowError as error:
            raise failed("edit", error, expected, expected_operation_id=expected) from error
        proposal = edited.proposal
        state = _state_of(reviews, proposal.operation_id)
    emit(
        {
            "command": "edit",
            "operation_id": proposal.operation_id,
            "case_id": proposal.case_id,
            "parent_operation_id": proposal.parent_operation_id,
            "state": state,
            "proposal": proposal,
            "pending_review": edited.pending_review,
        }
    )
    say(
        f"edited: case {proposal.case_id} operation {proposal.operation_id} replaces {expected} "
        f"({state or 'state not read'})"
    )
    return EXIT_DONE


def _show_decision(command: str, result: ApproveResult) -> int:
    operation = result.operation
    emit(
        {
            "command": command,
            "operation_id": operation.operation_id,
            "case_id": operation.case_id,
            "decision": operation.decision,
            "outcome": result.outcome,
            "replay": result.replay,
            "state": operation.state,
            "receipt": operation.receipt,
            **progress_fields(operation.progress),
            "operation": operation,
        }
    )
    replay = " (replay: decision already recorded)" if result.replay else ""
    subject = f"{operation.operation_id}{replay}"
    if result.outcome is Outcome.AWAITING_APPROVALS and operation.progress is not None:
        # The vote counts and nothing is written yet: done for this reviewer, so exit 0.
        say(f"vote recorded on {subject}: {waiting(operation.progress)}")
        return EXIT_DONE
    if result.outcome is Outcome.UNKNOWN:
        say(
            f"outcome UNKNOWN for {subject}: the decision is recorded but the effect is not confirmed; "
            "decisionflow-reconciler settles it"
        )
        return EXIT_UNKNOWN
    if result.outcome is Outcome.REJECTED:
        say(f"outcome REJECTED for {subject}: the receiver refused the effect: {operation.rejection_reason}")
        return EXIT_REFUSED
    receipt = f", receipt {operation.receipt_id}" if operation.receipt_id else ""
    say(f"outcome {result.outcome.value} for {subject}{receipt}")
    return EXIT_DONE


def _decide(args: argparse.Namespace, command: str) -> int:
    operation_id = args.operation_id
    with review_client(args) as reviews:
        try:
            result = reviews.approve(operation_id) if command == "approve" else reviews.decline(operation_id)
        except DecisionflowError as error:
            raise failed(command, error, operation_id, operation_id=operation_id) from error
    return _show_decision(command, result)


def run_approve(args: argparse.Namespace) -> int:
    """Approve args.operation_id; exit 0 committed, 42 Unknown, 3 refused or rejected, 1 error."""
    return _decide(args, "approve")


def run_decline(args: argparse.Namespace) -> int:
    """Decline args.operation_id; exit 0 declined, 3 refused, 1 error."""
    return _decide(args, "decline")


def run_show(args: argparse.Namespace) -> int:
    """Print a proposal (by operation id or a case's current one) and its operation."""
    subject = f"case {args.case_id}" if args.case_id else args.operation_id
    with review_client(args) as reviews:
        try:
            record = reviews.get_proposal(operation_id=args.operation_id, case_id=args.case_id)
        except DecisionflowError as error:
            context = {"case_id": args.case_id} if args.case_id else {"operation_id": args.operation_id}
            raise failed("show", error, subject, **context) from error
        # GetProposal's operation carries its progress while a review under a rule is pending.
        proposal, operation = record.proposal, record.operation
    emit(
        {
            "command": "show",
            "operation_id": proposal.operation_id,
            "case_id": proposal.case_id,
            "state": operation.state,
            "current": proposal.current,
            **progress_fields(operation.progress),
            "proposal": proposal,
            "operation": operation,
        }
    )
    current = "current" if proposal.current else "not current"
    say(
        f"case {proposal.case_id} operation {proposal.operation_id}: {operation.state.value} ({current})"
        + (f"; {described(operation.progress)}" if operation.progress is not None else "")
    )
    return EXIT_DONE


def run_status(args: argparse.Namespace) -> int:
    """Print where one operation stands; a read, so exit 0 whatever the state."""
    operation_id = args.operation_id
    with review_client(args) as reviews:
        try:
            operation = reviews.get_operation(operation_id)
        except DecisionflowError as error:
            raise failed("status", error, operation_id, operation_id=operation_id) from error
    emit(
        {
            "command": "status",
            "operation_id": operation.operation_id,
            "case_id": operation.case_id,
            "state": operation.state,
            "decision": operation.decision,
            "receipt": operation.receipt,
            **progress_fields(operation.progress),
            "operation": operation,
        }
    )
    receipt = f", receipt {operation.receipt_id}" if operation.receipt_id else ""
    progress = f"; {described(operation.progress)}" if operation.progress is not None else ""
    say(f"operation {operation.operation_id}: {operation.state.value}{receipt}{progress}")
    return EXIT_DONE


def run_whoami(args: argparse.Namespace) -> int:
    """Print who the orchestrator takes the given credentials to be: principal, roles and groups."""
    with review_client(args) as reviews:
        try:
            caller = reviews.get_caller()
        except DecisionflowError as error:
            raise failed("whoami", error, "the caller") from error
    roles = [role.value for role in Role if role in caller.roles]
    groups = sorted(caller.groups)
    emit({"command": "whoami", "principal": caller.principal, "roles": roles, "groups": groups})
    say(f"{caller.principal}: roles {', '.join(roles) or '(none)'}; groups {', '.join(groups) or '(none)'}")
    return EXIT_DONE

"""The operator's desk (role operator, as for ``decisionflow ops``): open operations with their age,
Unknown first, then APPROVED ones oldest first; one operation's every field (with a link to its audit
trail for those who may read the log); a re-drive and a recorded lookup, each behind a confirmation page."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from decisionflow.client import (
    AsyncOperationsClient,
    Consistency,
    DecisionflowError,
    LookupStatus,
    OperationState,
    OperationView,
    Receipt,
    Settlement,
)
from decisionflow.vocabulary import OperationId
from decisionflow_server.apps.console.navigation import AUDIT_LOG, admits
from decisionflow_server.apps.console.orchestrator import Orchestrator
from decisionflow_server.apps.console.pages import Pages
from decisionflow_server.apps.console.refusals import explain
from decisionflow_server.apps.console.review_pages import signed_in, to_sign_in
from decisionflow_server.apps.console.sessions import Session
from decisionflow_server.apps.console.signin import posted_form

# Rows shown per state: the desk is for what needs a person, not for browsing history.
ROWS_PER_STATE = 200
DESK_STATES = (OperationState.UNKNOWN, OperationState.APPROVED)


class OperatorPages:
    """Desk, describe, re-drive and settle, calling the orchestrator as the signed-in operator."""

    def __init__(self, orchestrator: Orchestrator, pages: Pages) -> None:
        self._orchestrator = orchestrator
        self._pages = pages

    async def desk(self, request: Request) -> Response:
        """List open operations: Unknown first, then APPROVED, each oldest first (or one state asked for)."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        asked = OperationState.__members__.get(request.query_params.get("state", "").upper())
        states = (asked,) if asked is not None and asked is not OperationState.UNSPECIFIED else DESK_STATES
        client = self._operations(session)
        sections: list[tuple[OperationState, list[OperationView]]] = []
        try:
            for state in states:
                rows: list[OperationView] = []
                async for operation in client.list_operations([state], page_size=ROWS_PER_STATE):
                    rows.append(operation)
                    if len(rows) >= ROWS_PER_STATE:
                        break
                sections.append((state, rows))
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing="list operations", role="operator"))
        return self._pages.render(
            request,
            "desk.html",
            sections=sections,
            last_lookup=_last_lookup(rows for _, rows in sections),
            states=[s for s in OperationState if s is not OperationState.UNSPECIFIED],
            now=datetime.now(UTC),
        )

    async def describe(self, request: Request) -> Response:
        """Show every field of one operation, with the re-drive and settle actions."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        operation_id = request.path_params["operation_id"]
        try:
            operation = await self._orchestrator.review(_token(session)).get_operation(operation_id)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing="read this operation", role="operator"))
        return self._pages.render(
            request,
            "operation.html",
            operation=operation,
            audit_trail=admits(session.roles, AUDIT_LOG),
            now=datetime.now(UTC),
        )

    async def confirm_redrive(self, request: Request) -> Response:
        """Ask before a re-drive: say what it does (to an operator; anyone else is refused, as the POST is)."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        refused = await self._unless_operator(request, session, "re-drive operations")
        if refused is not None:
            return refused
        return self._pages.render(request, "confirm_redrive.html", operation_id=request.path_params["operation_id"])

    async def redrive(self, request: Request) -> Response:
        """Re-drive the operation (Apply again with the same key and stored payload) and show the outcome."""
        checked = await posted_form(self._pages, request, signed_in(request))
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        operation_id = request.path_params["operation_id"]
        try:
            result = await self._operations(session).redrive_operation(operation_id)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing="re-drive operations", role="operator"))
        return self._pages.render(
            request, "redriven.html", outcome=result.outcome, operation=result.operation, now=datetime.now(UTC)
        )

    async def settle_form(self, request: Request) -> Response:
        """Show the form that records a lookup made at the receiver (to an operator; anyone else is refused)."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        refused = await self._unless_operator(request, session, "settle operations")
        if refused is not None:
            return refused
        return self._pages.render(
            request, "settle.html", operation_id=request.path_params["operation_id"], problem="", values={}
        )

    async def settle(self, request: Request) -> Response:
        """Record the lookup once confirmed; before that, show what would be recorded."""
        checked = await posted_form(self._pages, request, signed_in(request))
        if isinstance(checked, Response):
            return checked
        session, form = checked
        operation_id = request.path_params["operation_id"]
        values = {name: _field(form, name) for name in ("status", "consistency", "receipt_id")}
        try:
            settlement = _settlement(operation_id, values, datetime.now(UTC))
        except ValueError as problem:
            return self._pages.render(
                request, "settle.html", status=400, operation_id=operation_id, problem=str(problem), values=values
            )
        if _field(form, "confirmed") != "yes":
            return self._pages.render(
                request, "confirm_settle.html", operation_id=operation_id, settlement=settlement, values=values
            )
        try:
            result = await self._operations(session).settle_operation(settlement)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing="settle operations", role="operator"))
        return self._pages.render(
            request, "settled.html", settled=result.settled, operation=result.operation, now=datetime.now(UTC)
        )

    async def _unless_operator(self, request: Request, session: Session, doing: str) -> Response | None:
        """The refusal page (403 for a missing role) when the orchestrator does not serve this person the
        operator's calls, else None. The console asks, with one read of the desk's first row; it decides nothing."""
        try:
            async for _ in self._operations(session).list_operations([OperationState.UNKNOWN], page_size=1):
                break
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=doing, role="operator"))
        return None

    def _operations(self, session: Session) -> AsyncOperationsClient:
        return self._orchestrator.operations(_token(session))


def _settlement(operation_id: str, values: dict[str, str], now: datetime) -> Settlement:
    """Return the settlement the form describes; raise ValueError for a combination the server would refuse."""
    status = LookupStatus.__members__.get(values["status"].upper())
    consistency = Consistency.__members__.get(values["consistency"].upper())
    if status not in (LookupStatus.APPLIED, LookupStatus.NOT_FOUND):
        raise ValueError("choose what the lookup found: applied or not found")
    if consistency not in (Consistency.STRONG, Consistency.EVENTUAL):
        raise ValueError("choose where the answer came from: the primary (strong) or a replica (eventual)")
    receipt_id = values["receipt_id"].strip()
    if status is LookupStatus.APPLIED and not receipt_id:
        raise ValueError("an applied lookup needs the receipt id it showed")
    if status is LookupStatus.NOT_FOUND and receipt_id:
        raise ValueError("a lookup that found nothing has no receipt id")
    receipt = Receipt(receipt_id, OperationId(operation_id), now) if receipt_id else None
    return Settlement(operation_id, status, receipt, consistency, now)


def _token(session: Session) -> str:
    if session.access_token is None:
        raise RuntimeError("a signed-in session holds an access token")
    return session.access_token


def _field(form: FormData, name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""


def _last_lookup(sections: Iterable[list[OperationView]]) -> datetime | None:
    """When the last lookup of a listed operation was recorded: the reconciler's last pass over the
    open operations (or an operator's recorded lookup, whichever came later); None when none has one."""
    notes = (op.last_lookup for rows in sections for op in rows)
    return max((note.looked_up_at for note in notes if note is not None and note.looked_up_at), default=None)

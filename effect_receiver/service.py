"""The receiver's use cases: validate, write once, look up, list. No gRPC here.

Failpoints (enabled only by configuration) fire after an Apply's transaction has committed,
for a new effect and for a replay alike:

- ``receiver.commit_then_lose_reply``: the call fails with UNAVAILABLE (reason REPLY_LOST),
  so the caller cannot know the effect exists until it looks it up;
- ``receiver.commit_then_exit``: the process ends at once, as if killed after the commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from decisionflow.vocabulary import (
    CaseId,
    Consistency,
    EffectRequest,
    OperationId,
    Receipt,
    case_id_violations,
    operation_id_violations,
)
from decisionflow_server.foundation import page_tokens
from decisionflow_server.runtime import tracing
from decisionflow_server.runtime.failpoints import FailpointError, Failpoints
from effect_receiver.domain import (
    DEFAULT_PAGE_SIZE,
    ApplyAnswer,
    EffectPage,
    LookupAnswer,
    batch_violations,
    beyond_retention,
    check_effect,
    page_size_violations,
)
from effect_receiver.errors import FieldViolation, InvalidRequest, KeyRetentionExceeded, ReplyLost
from effect_receiver.failpoints import COMMIT_THEN_EXIT, COMMIT_THEN_LOSE_REPLY, FAILPOINT_NAMES
from effect_receiver.store import EffectStore

_MAX_SEQUENCE = 2**63

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The wall clock, as an aware UTC datetime."""
    return datetime.now(UTC)


def new_receipt_id() -> str:
    """A fresh receipt id: ``rcpt-`` followed by 32 hex digits of a random UUID."""
    return "rcpt-" + uuid.uuid4().hex


def encode_page_token(after: int) -> str:
    """Return the opaque token that resumes a listing after the effect with sequence after."""
    return page_tokens.encode("effects", after)


def decode_page_token(token: str) -> int:
    """Return the sequence a page token resumes after (0 for the empty token); InvalidRequest if forged."""
    if not token:
        return 0
    try:
        (after,) = page_tokens.decode("effects", token, 1)
    except ValueError:
        after = None
    # Sequences are 64-bit: a larger number would overflow the query's parameter (answered UNKNOWN).
    if type(after) is not int or not 0 <= after < _MAX_SEQUENCE:
        raise InvalidRequest([FieldViolation("page_token", "is not a token from a previous ListEffects response")])
    return after


class ReceiverService:
    """Writes each effect once and answers lookups; lookups go to the replica when one is given."""

    def __init__(
        self,
        primary: EffectStore,
        *,
        replica: EffectStore | None = None,
        failpoints: Failpoints | None = None,
        key_retention: timedelta | None = None,
        clock: Clock = utc_now,
        receipt_ids: Callable[[], str] = new_receipt_id,
    ) -> None:
        self._primary = primary
        self._reader = replica or primary
        self._consistency = Consistency.STRONG if replica is None else Consistency.EVENTUAL
        self._failpoints = failpoints or Failpoints("", FAILPOINT_NAMES)
        self._clock = clock
        self._receipt_ids = receipt_ids
        self.key_retention = key_retention

    def apply(self, request: EffectRequest) -> ApplyAnswer:
        """Write the effect once: CREATED the first time, REPLAYED with the original receipt after.

        Raises InvalidRequest (nothing written), IdempotencyKeyReused (stored effect
        unchanged), KeyRetentionExceeded (the key is absent and may have been pruned; nothing
        written), Unavailable, or ReplyLost when that failpoint fires after the commit.
        """
        checked = check_effect(request)
        if isinstance(checked, list):
            raise InvalidRequest(checked)
        operation_id, case_id, first_attempted_at = checked.operation_id, checked.case_id, request.first_attempted_at
        now = self._clock()
        if beyond_retention(first_attempted_at, self.key_retention, now):
            # Replay only: a present key still answers REPLAYED, an absent one may have been pruned.
            replayed = self._primary.replay(checked)
            if replayed is None:
                assert first_attempted_at is not None and self.key_retention is not None
                logger.warning(
                    "apply refused: first attempt beyond the key retention",
                    extra={"rpc": "Apply", "operation_id": operation_id, "case_id": case_id},
                )
                retention = f"{self.key_retention.total_seconds():g}s"
                raise KeyRetentionExceeded(operation_id, first_attempted_at.isoformat(), retention)
            answer = replayed
        else:
            answer = self._primary.apply(checked, Receipt(self._receipt_ids(), operation_id, now))
        # The call's access line carries the outcome: one line per Apply, not a second for the same event.
        tracing.annotate(outcome=answer.outcome.value)
        self._failpoints.hit(COMMIT_THEN_EXIT)
        try:
            self._failpoints.hit(COMMIT_THEN_LOSE_REPLY)
        except FailpointError as exc:
            raise ReplyLost(operation_id) from exc
        return answer

    def lookup(self, operation_id: OperationId) -> LookupAnswer:
        """Return whether the effect of operation_id exists, with the consistency of the answer."""
        violations = operation_id_violations(operation_id)
        if violations:
            raise InvalidRequest(violations)
        # Taken before the read: a NOT_FOUND then holds at least until observed_at.
        observed_at = self._clock()
        receipt = self._reader.lookup(operation_id)
        return LookupAnswer(operation_id, receipt, self._consistency, observed_at)

    def batch_lookup(self, operation_ids: Sequence[OperationId]) -> list[LookupAnswer]:
        """Return one answer per requested id, in request order, from a single query."""
        violations = batch_violations(operation_ids)
        if violations:
            raise InvalidRequest(violations)
        observed_at = self._clock()
        receipts = self._reader.batch_lookup(operation_ids)
        return [
            LookupAnswer(operation_id, receipts.get(operation_id), self._consistency, observed_at)
            for operation_id in operation_ids
        ]

    def list_effects(self, case_id: CaseId, page_size: int, page_token: str) -> tuple[EffectPage, str]:
        """Return one page of the case's effects, oldest first, and the token for the next page ('' if last)."""
        violations = case_id_violations(case_id) + page_size_violations(page_size)
        if violations:
            raise InvalidRequest(violations)
        after = decode_page_token(page_token)
        # From the primary: operators and the demo count effects, and a lagging count misleads.
        page = self._primary.list_effects(case_id, after=after, limit=page_size or DEFAULT_PAGE_SIZE)
        next_token = "" if page.next_after is None else encode_page_token(page.next_after)
        return page, next_token

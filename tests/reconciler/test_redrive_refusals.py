"""A re-drive refused by a real orchestrator: NOT_REDRIVABLE (another reconciler settled the operation
between the listing and the re-drive) is "already settled", with the state the orchestrator names.

The race is made at the seam: the pass's OperationsPort is the real client, except that just before
each re-drive a rival client re-drives the same operation first, as a second reconciler would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import grpc
import pytest

from decisionflow import reasons
from decisionflow.client import (
    NotRedrivable,
    OperationsClient,
    OperationState,
    OperationView,
    ReceiverClient,
    RedriveResult,
    Settlement,
    SettleResult,
)
from decisionflow.client.errors import DecisionflowError
from decisionflow.v1 import common_pb2, review_pb2
from reconciler.domain import PassSettings
from reconciler.main import open_channels, utc_now
from reconciler.service import Reconciler
from tests.support.reconciling import AFTER_DECISION, approve_and_crash, operation, reconciler_config
from tests.support.stack import Stack, start_request


@dataclass
class RivalFirst:
    """OperationsPort: the real client, with a rival re-drive of the same operation before each re-drive."""

    real: OperationsClient
    rival: OperationsClient
    refusals: list[DecisionflowError] = field(default_factory=list)

    def list_operations(
        self, states: Iterable[OperationState] = (), *, min_age: timedelta | None = None, page_size: int = 0
    ) -> Iterator[OperationView]:
        return self.real.list_operations(states, min_age=min_age, page_size=page_size)

    def batch_settle_operations(self, settlements: Sequence[Settlement]) -> tuple[SettleResult, ...]:
        return self.real.batch_settle_operations(settlements)

    def redrive_operation(self, operation_id: str) -> RedriveResult:
        self.rival.redrive_operation(operation_id)
        try:
            return self.real.redrive_operation(operation_id)
        except DecisionflowError as error:
            self.refusals.append(error)
            raise


def test_a_redrive_a_rival_settled_first_is_already_settled(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()
    stack.stop_orchestrator()
    stack.start_orchestrator(failpoints=AFTER_DECISION)
    op = approve_and_crash(stack, "T-raced")
    stack.stop_orchestrator()
    stack.start_orchestrator()
    # Decision and attempt are one transaction: the failed request left it attempted, Apply never sent.
    assert operation(stack, op).state == common_pb2.OPERATION_STATE_UNKNOWN

    config = reconciler_config(stack)
    with open_channels(config) as (orchestrator, receiver):
        port = RivalFirst(OperationsClient(orchestrator, timeout=5), OperationsClient(orchestrator, timeout=5))
        with Reconciler(
            port, ReceiverClient(receiver, timeout=5), PassSettings(grace=timedelta(0)), clock=utc_now
        ) as reconciler:
            summary = reconciler.run_pass()

    counts = summary.redriven
    assert (counts.already_settled, counts.failed, counts.committed) == (1, 0, 0)
    assert summary.still_unknown == 0
    # The refusal crossed the wire with the contract's metadata, read back as typed attributes.
    (refusal,) = port.refusals
    assert isinstance(refusal, NotRedrivable)
    assert refusal.code is grpc.StatusCode.FAILED_PRECONDITION and refusal.definite
    assert (refusal.reason, refusal.operation_id, refusal.state) == (
        reasons.NOT_REDRIVABLE,
        op,
        OperationState.COMMITTED,
    )
    assert refusal.metadata[reasons.STATE] == "OPERATION_STATE_COMMITTED"
    assert operation(stack, op).state == common_pb2.OPERATION_STATE_COMMITTED
    assert stack.effects("T-raced") == 1


@pytest.mark.parametrize("state", ["PENDING_REVIEW", "DECLINED"])
def test_a_redrive_of_an_operation_never_approved_is_refused_naming_its_state(
    make_stack: Callable[..., Stack], state: str
) -> None:
    stack = make_stack()
    review = stack.review()
    op = review.StartReview(start_request(case_id="T-never"), timeout=10).proposal.operation_id
    if state == "DECLINED":
        review.Approve(review_pb2.ApproveRequest(operation_id=op, decision=common_pb2.DECISION_DECLINE), timeout=10)
    config = reconciler_config(stack)
    with open_channels(config) as (orchestrator, _), pytest.raises(NotRedrivable) as refused:
        OperationsClient(orchestrator, timeout=5).redrive_operation(op)
    assert refused.value.state is OperationState[state]
    assert refused.value.operation_id == op
    assert stack.effects("T-never") == 0

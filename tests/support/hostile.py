"""A receiver and an orchestrator on loopback with authentication off, one pending proposal, and raw
channels that send bytes exactly as given."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import pytest

from decisionflow.channels import MAX_MESSAGE_BYTES
from decisionflow.v1 import effect_receiver_pb2, events_pb2, review_pb2
from decisionflow_server.runtime.serving import ReceiveLimits
from effect_receiver.main import RECEIVE_LIMITS as RECEIVER_LIMITS
from orchestrator.main import RECEIVE_LIMITS as ORCHESTRATOR_LIMITS
from tests.security.dbstate import Snapshot, snapshot
from tests.support.secure import raw_call
from tests.support.servers import LoopThread
from tests.support.stack import Stack, start_request


@dataclass
class Target:
    """The servers under attack and the id of the pending proposal they hold."""

    stack: Stack
    operation_id: str
    _channels: dict[bool, grpc.Channel] = field(default_factory=dict)

    def channel(self, receiver: bool) -> grpc.Channel:
        """A raw loopback channel to the receiver or the orchestrator (allowed to send oversize frames)."""
        if receiver not in self._channels:
            port = self.stack.receiver_port if receiver else self.stack.orchestrator_port
            self._channels[receiver] = grpc.insecure_channel(
                f"127.0.0.1:{port}",
                options=[("grpc.enable_retries", 0), ("grpc.max_send_message_length", 8 * MAX_MESSAGE_BYTES)],
            )
        return self._channels[receiver]

    @staticmethod
    def receive_limits(receiver: bool) -> ReceiveLimits:
        """The receive limits of the receiver's or the orchestrator's methods."""
        return RECEIVER_LIMITS if receiver else ORCHESTRATOR_LIMITS

    @classmethod
    def refusal_code(cls, receiver: bool, size: int) -> grpc.StatusCode:
        """The code a bad request of size bytes is refused with: gRPC's RESOURCE_EXHAUSTED above the
        server's message limit, else INVALID_ARGUMENT (over the method's own limit, or not valid)."""
        too_big = size > cls.receive_limits(receiver).largest
        return grpc.StatusCode.RESOURCE_EXHAUSTED if too_big else grpc.StatusCode.INVALID_ARGUMENT

    def states(self) -> tuple[Snapshot, Snapshot]:
        """Every row of both databases."""
        return snapshot(self.stack.orchestrator_url), snapshot(self.stack.receiver_url)

    def settled_states(self) -> tuple[Snapshot, Snapshot]:
        """states() once the audit log's waiting entries are sequenced. An admitted watch sequences them
        before its first message (as the sequencer job would): after this one, a watch during a test
        has nothing left to write, so "nothing written" holds for WatchEvents too."""
        request = events_pb2.WatchEventsRequest(from_now=True).SerializeToString()
        code, _ = raw_call(self.channel(receiver=False), "/decisionflow.v1.EventService/WatchEvents", request)
        assert code == grpc.StatusCode.OK, code
        return self.states()

    def assert_serving(self) -> None:
        """Both servers still answer an ordinary call correctly."""
        found = self.stack.review().GetOperation(
            review_pb2.GetOperationRequest(operation_id=self.operation_id), timeout=10
        )
        assert found.operation.operation_id == self.operation_id
        lookup = self.stack.receiver().Lookup(
            effect_receiver_pb2.LookupRequest(operation_id=self.operation_id), timeout=10
        )
        assert lookup.result.operation_id == self.operation_id

    def close(self) -> None:
        """Close the raw channels and stop both servers."""
        for channel in self._channels.values():
            channel.close()
        self.stack.close()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """Servers shared by one test module; every test checks they hold the same rows before and after."""
    directory = tmp_path_factory.mktemp("hostile")
    stack = Stack(f"sqlite:///{directory / 'receiver.db'}", f"sqlite:///{directory / 'orchestrator.db'}", LoopThread())
    attacked = Target(stack, "")
    try:
        stack.start_receiver()
        stack.start_orchestrator()
        attacked.operation_id = stack.review().StartReview(start_request(), timeout=15).proposal.operation_id
        yield attacked
    finally:
        attacked.close()

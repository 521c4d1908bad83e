"""The test stack on fixed ports, each server restartable in place, for the stateful model."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from decisionflow.client import OperationsClient, ReceiverClient
from decisionflow.retry import NO_RETRY
from reconciler.domain import PassSettings, PassSummary
from reconciler.service import Reconciler
from tests.campaigns.workload import channel
from tests.support.servers import LoopThread
from tests.support.stack import Stack


@dataclass
class InProcessStack:
    """A receiver and an orchestrator on one event-loop thread, each restarted on the port it first bound."""

    workdir: Path
    receiver_timeout_seconds: float = 0.2
    receiver_failpoints: str = ""
    stack: Stack = field(init=False)

    def __post_init__(self) -> None:
        self.stack = Stack(
            f"sqlite:///{self.workdir / 'receiver.db'}",
            f"sqlite:///{self.workdir / 'orchestrator.db'}",
            LoopThread(),
            stop_grace=0,
        )

    @property
    def receiver_target(self) -> str:
        """host:port of the receiver."""
        return f"127.0.0.1:{self.stack.receiver_port}"

    @property
    def orchestrator_target(self) -> str:
        """host:port of the orchestrator."""
        return f"127.0.0.1:{self.stack.orchestrator_port}"

    def start_receiver(self, failpoints: str = "") -> None:
        """(Re)start the receiver with failpoints (empty: none)."""
        self.stack.start_receiver(failpoints, address=self.receiver_target)
        self.receiver_failpoints = failpoints

    def start_orchestrator(self) -> None:
        """(Re)start the orchestrator; nothing in memory survives, as after a crash."""
        if self.stack.servers:
            self.stack.stop_orchestrator()
        self.stack.start_orchestrator(
            address=self.orchestrator_target, receiver_timeout_seconds=self.receiver_timeout_seconds
        )

    def reconcile(self) -> PassSummary:
        """One reconciler pass through the reconciler's service API, as the command wires it."""
        orchestrator, receiver = channel(self.orchestrator_target), channel(self.receiver_target)
        try:
            with Reconciler(
                OperationsClient(orchestrator, timeout=5),
                ReceiverClient(receiver, timeout=5),
                PassSettings(grace=timedelta(0), alert_after=timedelta(0), redrive_margin=timedelta(seconds=5)),
                clock=lambda: datetime.now(UTC),
                receiver_single_attempt=ReceiverClient(receiver, timeout=5, policy=NO_RETRY),
            ) as reconciler:
                return reconciler.run_pass()
        finally:
            orchestrator.close()
            receiver.close()

    def close(self) -> None:
        """Stop both servers and the loop."""
        self.stack.close()

"""An in-process receiver and orchestrator on fixed ports, restartable in place, for the stateful model."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from decisionflow.client import OperationsClient, ReceiverClient
from decisionflow.retry import NO_RETRY
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import ReceiverServer
from effect_receiver.main import create_server as create_receiver
from orchestrator.config import OrchestratorConfig
from orchestrator.main import OrchestratorServer
from orchestrator.main import create_server as create_orchestrator
from reconciler.domain import PassSummary
from reconciler.service import PassSettings, Reconciler
from tests.campaigns.workload import channel
from tests.support.servers import LoopThread
from tests.support.stack import CHECKPOINT_KEY


@dataclass
class InProcessStack:
    """A receiver and an orchestrator on one event-loop thread, each restarted on the port it first bound."""

    workdir: Path
    receiver_timeout_seconds: float = 0.2
    loop: LoopThread = field(default_factory=LoopThread)
    receiver: ReceiverServer | None = None
    orchestrator: OrchestratorServer | None = None
    receiver_port: int = 0
    orchestrator_port: int = 0
    receiver_failpoints: str = ""

    @property
    def receiver_target(self) -> str:
        """host:port of the receiver."""
        return f"127.0.0.1:{self.receiver_port}"

    @property
    def orchestrator_target(self) -> str:
        """host:port of the orchestrator."""
        return f"127.0.0.1:{self.orchestrator_port}"

    def start_receiver(self, failpoints: str = "") -> None:
        """(Re)start the receiver with failpoints (empty: none)."""
        if self.receiver is not None:
            self.loop.run(self.receiver.stop(0))
        config = ReceiverConfig(
            address=f"127.0.0.1:{self.receiver_port}",
            database_url=f"sqlite:///{self.workdir / 'receiver.db'}",
            failpoints=failpoints,
        )
        self.receiver = self.loop.run(create_receiver(config))
        self.receiver_port, self.receiver_failpoints = self.receiver.port, failpoints

    def start_orchestrator(self) -> None:
        """(Re)start the orchestrator; nothing in memory survives, as after a crash."""
        if self.orchestrator is not None:
            self.loop.run(self.orchestrator.stop(0))
        config = OrchestratorConfig(
            checkpoint_keys=(CHECKPOINT_KEY.encode(),),
            address=f"127.0.0.1:{self.orchestrator_port}",
            database_url=f"sqlite:///{self.workdir / 'orchestrator.db'}",
            receiver_target=self.receiver_target,
            receiver_timeout_seconds=self.receiver_timeout_seconds,
        )
        self.orchestrator = self.loop.run(create_orchestrator(config))
        self.orchestrator_port = self.orchestrator.port

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
        for server in (self.orchestrator, self.receiver):
            if server is not None:
                self.loop.run(server.stop(0))
        self.loop.close()

"""The host's lifecycle with a real receiver's parts: stop runs in reverse order of start (the jobs stop
while the server still serves; what the service built closes only after the server has drained), and
a start that fails after opening things closes each of them (the metrics port is free again)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import Engine

from decisionflow_server.foundation.processes import free_port
from decisionflow_server.runtime.host import Host, Wiring
from effect_receiver.config import ReceiverConfig
from effect_receiver.grpc_api import EffectReceiverServicer, register
from effect_receiver.main import SERVICE
from effect_receiver.metrics import ReceiverMetrics
from effect_receiver.service import ReceiverService
from effect_receiver.store import EffectStore


async def _health(port: int) -> str:
    """The server's overall health, or the code of the failed check (UNAVAILABLE once it has stopped)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.aio.AioRpcError as error:
            return error.code().name
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))


class _RecordedJob:
    def __init__(self, events: list[str], port: list[int]) -> None:
        self._events = events
        self._port = port

    def start(self) -> None:
        self._events.append("job started")

    async def stop(self) -> None:
        self._events.append(f"job stopped ({await _health(self._port[0])})")


def test_stop_stops_the_jobs_while_serving_and_closes_the_parts_after_the_server(tmp_path: Path) -> None:
    config = ReceiverConfig(address="127.0.0.1:0", database_url=f"sqlite:///{tmp_path / 'receiver.db'}")
    events: list[str] = []
    port: list[int] = []

    async def build(host: Host, engine: Engine) -> Wiring:
        async def close_part() -> None:
            events.append(f"part closed ({await _health(port[0])})")

        host.close_on_stop(close_part)
        servicer = EffectReceiverServicer(ReceiverService(EffectStore(engine)))
        return Wiring(register(servicer), jobs=(_RecordedJob(events, port),))

    async def scenario() -> None:
        host = await Host.start(SERVICE, config, ReceiverMetrics(), build)
        port.append(host.port)
        events.append(f"serving ({await _health(host.port)})")
        await host.stop(1.0)
        await host.stop(1.0)  # a second stop does nothing

    asyncio.run(scenario())
    assert events == ["job started", "serving (SERVING)", "job stopped (SERVING)", "part closed (UNAVAILABLE)"]


def test_a_failed_start_closes_what_it_opened(tmp_path: Path) -> None:
    metrics_port = free_port()
    config = ReceiverConfig(
        address="127.0.0.1:0", database_url=f"sqlite:///{tmp_path / 'receiver.db'}", metrics_port=metrics_port
    )
    closed: list[str] = []

    async def build(host: Host, engine: Engine) -> Wiring:
        async def close_part() -> None:
            closed.append("part")

        host.close_on_stop(close_part)
        raise RuntimeError("the service could not be built")

    with pytest.raises(RuntimeError, match="could not be built"):
        asyncio.run(Host.start(SERVICE, config, ReceiverMetrics(), build))
    assert closed == ["part"]
    with socket.socket() as probe:  # the metrics endpoint released its port
        probe.bind(("127.0.0.1", metrics_port))

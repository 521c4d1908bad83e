"""The gRPC server families, recorded by the one pass per call, on a real aio server whose methods
end in every way a call can end: an answer, an abort, an exception escaping the method, the
deadline passing, the caller leaving."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from decisionflow_server.runtime.metrics import GrpcServerMetrics
from decisionflow_server.runtime.served_calls import ServedCalls

CHECK = {"grpc_service": "grpc.health.v1.Health", "grpc_method": "Check", "grpc_type": "unary"}


class _Endings(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """Health/Check, ending as the requested service name says."""

    async def Check(self, request: health_pb2.HealthCheckRequest, context: Any) -> health_pb2.HealthCheckResponse:
        if request.service == "abort":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "refused")
        if request.service == "raise":
            raise RuntimeError("a bug")
        if request.service == "slow":
            await asyncio.sleep(2)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


async def _exercise(registry: CollectorRegistry) -> list[grpc.StatusCode]:
    metrics = GrpcServerMetrics(registry)
    server = grpc.aio.server(interceptors=[ServedCalls({}, metrics=metrics, receive_limit=lambda method: 1024)])
    health_pb2_grpc.add_HealthServicer_to_server(_Endings(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    codes = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service, timeout in (("", 5.0), ("abort", 5.0), ("raise", 5.0), ("slow", 0.3)):
                try:
                    await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
                    codes.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as error:
                    codes.append(error.code())
            left = stub.Check(health_pb2.HealthCheckRequest(service="slow"), timeout=5)
            while registry.get_sample_value("grpc_server_started_total", CHECK) != 5:
                await asyncio.sleep(0.01)  # the server holds the call: the caller leaves only now
            left.cancel()
            codes.append(grpc.StatusCode.CANCELLED)
            # The calls the server ends on its own (the deadline's, the one left) are recorded as their
            # handlers finish, which on a loaded machine can come after the server would stop.
            ended = asyncio.get_running_loop().time() + 15
            while _handled(registry) < len(codes) and asyncio.get_running_loop().time() < ended:
                await asyncio.sleep(0.01)
    finally:
        await server.stop(3)  # lets the cancelled calls finish and be recorded
    return codes


def _handled(registry: CollectorRegistry) -> float:
    """Calls of Check recorded as ended, whatever their code."""
    return sum(
        sample.value
        for metric in registry.collect()
        if metric.name == "grpc_server_handled"
        for sample in metric.samples
        if sample.name == "grpc_server_handled_total" and sample.labels.get("grpc_method") == "Check"
    )


def test_each_ending_is_counted_with_the_code_the_caller_got() -> None:
    registry = CollectorRegistry()
    codes = asyncio.run(_exercise(registry))
    assert codes == [
        grpc.StatusCode.OK,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    ]
    value = registry.get_sample_value
    for code in codes:
        assert value("grpc_server_handled_total", {**CHECK, "grpc_code": code.name}) == 1, code
    assert value("grpc_server_started_total", CHECK) == 5
    assert value("grpc_server_handling_seconds_count", CHECK) == 5

"""The bare two-hop chain the real figures are compared with: client → hop A → hop B over grpc.aio.

Hop A serves ReviewService.Approve and, for every call, sends hop B an Apply request of the size the
orchestrator sends; hop B answers with an Apply response of the receiver's size, and hop A with an
Approve response of the orchestrator's size. No database, no workflow, no validation: what is left is
the cost of the two gRPC hops in Python on this machine.

Run as ``python -m bench._baseline a --downstream HOST:PORT --port-file FILE`` or
``python -m bench._baseline b --port-file FILE``; ``--workers N`` serves the hop from N processes on
one port, as ``--workers`` does for the services.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from bench import _workload
from decisionflow.channels import MAX_MESSAGE_BYTES, aio_insecure_channel
from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc, review_pb2
from decisionflow_server.runtime import workers
from decisionflow_server.runtime.host import announce_listening
from decisionflow_server.runtime.serving import ReceiveLimits, TransportLimits

Context = grpc.aio.ServicerContext[Any, Any]
HOP_TIMEOUT_SECONDS = 30.0
REVIEW_SERVICE = review_pb2.DESCRIPTOR.services_by_name["ReviewService"].full_name
RECEIVER_SERVICE = effect_receiver_pb2.DESCRIPTOR.services_by_name["EffectReceiverService"].full_name


class _HopA:
    def __init__(self, downstream: effect_receiver_pb2_grpc.EffectReceiverServiceAsyncStub) -> None:
        self._downstream = downstream
        self._apply = _workload.sample_apply_request()
        self._reply = _workload.sample_approve_response()

    async def approve(self, request: review_pb2.ApproveRequest, context: Context) -> review_pb2.ApproveResponse:
        """Forward one Apply of the real size to hop B and answer with an Approve response of the real size."""
        await self._downstream.Apply(self._apply, timeout=HOP_TIMEOUT_SECONDS)
        return self._reply

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        """ReviewService with Approve only."""
        return grpc.method_handlers_generic_handler(
            REVIEW_SERVICE,
            {
                "Approve": grpc.unary_unary_rpc_method_handler(
                    self.approve,
                    request_deserializer=review_pb2.ApproveRequest.FromString,
                    response_serializer=review_pb2.ApproveResponse.SerializeToString,
                )
            },
        )


class _HopB:
    def __init__(self) -> None:
        self._reply = _workload.sample_apply_response()

    async def apply(
        self, request: effect_receiver_pb2.ApplyRequest, context: Context
    ) -> effect_receiver_pb2.ApplyResponse:
        """Answer with an Apply response of the real size."""
        return self._reply

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        """EffectReceiverService with Apply only."""
        return grpc.method_handlers_generic_handler(
            RECEIVER_SERVICE,
            {
                "Apply": grpc.unary_unary_rpc_method_handler(
                    self.apply,
                    request_deserializer=effect_receiver_pb2.ApplyRequest.FromString,
                    response_serializer=effect_receiver_pb2.ApplyResponse.SerializeToString,
                )
            },
        )


async def _serve(hop: str, downstream: str | None, address: str, ready: workers.Ready, *, reuse_port: bool) -> None:
    limits = TransportLimits.defaults()
    server = grpc.aio.server(
        options=limits.server_options(ReceiveLimits(default=MAX_MESSAGE_BYTES), reuse_port=reuse_port)
    )
    channel = None
    if hop == "a":
        assert downstream is not None
        channel = aio_insecure_channel(downstream)
        server.add_generic_rpc_handlers([_HopA(effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel)).handler()])
    else:
        server.add_generic_rpc_handlers([_HopB().handler()])
    port = server.add_insecure_port(address)
    await server.start()
    ready(port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1.0)
    if channel is not None:
        await channel.close(None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one hop of the baseline chain until SIGTERM."""
    cli = argparse.ArgumentParser(prog="python -m bench._baseline", description="one hop of the bare gRPC chain")
    cli.add_argument("hop", choices=("a", "b"))
    cli.add_argument("--downstream", help="host:port of hop B (hop A only)")
    cli.add_argument("--port-file", type=Path, required=True)
    cli.add_argument("--workers", type=int, default=1, help="processes serving the hop's port (SO_REUSEPORT)")
    ns = cli.parse_args(argv)
    if ns.hop == "a" and not ns.downstream:
        cli.error("hop a needs --downstream")
    name = f"baseline-{ns.hop}"

    def announce(port: int) -> None:
        announce_listening(name, port, ns.port_file)

    if ns.workers <= 1:
        asyncio.run(_serve(ns.hop, ns.downstream, "127.0.0.1:0", announce, reuse_port=False))
        return 0

    # As the services do (decisionflow_server.runtime.workers): forked before any gRPC object exists, one port.
    def worker(_index: int, address: str, ready: workers.Ready) -> int:
        asyncio.run(_serve(ns.hop, ns.downstream, address, ready, reuse_port=True))
        return 0

    with workers.claim("127.0.0.1:0") as address:
        return workers.run_workers(ns.workers, address, worker, announce)


if __name__ == "__main__":
    sys.exit(main())

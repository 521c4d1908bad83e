"""Run a service with extra gRPC server arguments, for measuring candidates that are not settings:
``python -m bench._grpc_options <service module> <its flags…>``.

The core arguments come from the environment as a JSON list of [name, value] pairs
(``GRPC_OPTIONS_ENV``); each replaces the service's own argument of that name or is added to them.
``MAXIMUM_CONCURRENT_RPCS_ENV`` sets grpc.aio.server's ``maximum_concurrent_rpcs`` (calls handed to
Python at once; the others wait in gRPC core). SIGUSR1 makes the process
hand the C allocator's free memory back to the kernel (glibc ``malloc_trim``), so a measurement can
tell memory still in use from memory the allocator only keeps.
"""

from __future__ import annotations

import ctypes
import json
import os
import runpy
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import grpc

from decisionflow_server.runtime.serving import ReceiveLimits, TransportLimits

GRPC_OPTIONS_ENV = "BENCH_GRPC_OPTIONS"
MAXIMUM_CONCURRENT_RPCS_ENV = "BENCH_MAXIMUM_CONCURRENT_RPCS"


def _options(text: str) -> list[tuple[str, Any]]:
    pairs = json.loads(text or "[]")
    return [(str(name), value) for name, value in pairs]


def _with_extra(extra: Sequence[tuple[str, Any]]) -> None:
    original = TransportLimits.server_options
    names = {name for name, _ in extra}

    def server_options(self: TransportLimits, receive: ReceiveLimits, *, reuse_port: bool = False) -> list[Any]:
        own = [(name, value) for name, value in original(self, receive, reuse_port=reuse_port) if name not in names]
        return [*own, *extra]

    TransportLimits.server_options = server_options  # type: ignore[method-assign]


def _with_maximum_concurrent_rpcs(maximum: int) -> None:
    original = grpc.aio.server

    def server(*args: Any, **kwargs: Any) -> grpc.aio.Server:
        return original(*args, **{**kwargs, "maximum_concurrent_rpcs": maximum})

    grpc.aio.server = server


def _trim(signum: int, frame: FrameType | None) -> None:
    ctypes.CDLL(None).malloc_trim(0)


def main() -> None:
    """Patch the server options, then run the service module as ``python -m`` would."""
    _with_extra(_options(os.environ.get(GRPC_OPTIONS_ENV, "")))
    maximum = os.environ.get(MAXIMUM_CONCURRENT_RPCS_ENV)
    if maximum:
        _with_maximum_concurrent_rpcs(int(maximum))
    signal.signal(signal.SIGUSR1, _trim)
    module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""Server interceptors' one way to take a gRPC method handler apart and build it again around a
new behaviour, whatever its kind (unary or streaming on either side), and to tell the status code
a call ended with. Server-only: the light client's interceptor types are
``decisionflow.client_interceptors``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import grpc

# The gRPC generics are not subscriptable at run time: these aliases are what every server
# interceptor of the project subclasses or annotates with.
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Context = grpc.aio.ServicerContext[Any, Any]
    ServerInterceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    Handler = grpc.RpcMethodHandler
    Context = grpc.aio.ServicerContext
    ServerInterceptor = grpc.aio.ServerInterceptor

_CODES_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}


def behaviour_of(handler: Handler) -> Callable[..., Any]:
    """Return the function that serves the handler's calls (its coroutine or async generator)."""
    if handler.request_streaming and handler.response_streaming:
        behaviour = handler.stream_stream
    elif handler.request_streaming:
        behaviour = handler.stream_unary
    elif handler.response_streaming:
        behaviour = handler.unary_stream
    else:
        behaviour = handler.unary_unary
    return cast(Callable[..., Any], behaviour)


def with_behaviour(handler: Handler, behaviour: Callable[..., Any]) -> Handler:
    """Return a handler of the same kind and (de)serializers as handler, served by behaviour."""
    if handler.request_streaming and handler.response_streaming:
        factory: Callable[..., Handler] = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        factory = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        factory = grpc.unary_stream_rpc_method_handler
    else:
        factory = grpc.unary_unary_rpc_method_handler
    return factory(
        behaviour,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def final_code(context: Context, error: BaseException | None) -> grpc.StatusCode:
    """Return the status code the caller receives from a call that ended with error (None: returned):
    the code an abort (or the method) set, else OK; for an exception that escapes the method, what
    gRPC answers for it."""
    if error is not None and not isinstance(error, grpc.aio.AbortError):
        if isinstance(error, asyncio.CancelledError):
            # The call ended under the method: its deadline passed, or the caller went away.
            remaining = context.time_remaining()
            expired = remaining is not None and remaining <= 0
            return grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
        return grpc.StatusCode.UNKNOWN
    code: object = context.code()
    if isinstance(code, int):  # some grpc versions keep the number, not the enum
        code = _CODES_BY_VALUE.get(code)
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.OK if error is None else grpc.StatusCode.UNKNOWN

"""Server interceptors' one way to take a gRPC method handler apart and build it again around a
new behaviour, whatever its kind (unary or streaming on either side)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import grpc

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler  # not subscriptable at run time


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

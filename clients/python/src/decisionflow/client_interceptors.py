"""The gRPC client interceptor types the light client subclasses (bearer tokens, client spans).

The gRPC generics are not subscriptable at run time: these aliases are what the client's
interceptors subclass and annotate with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    AioUnaryUnaryClientInterceptor = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    AioUnaryStreamClientInterceptor = grpc.aio.UnaryStreamClientInterceptor[Any, Any]
    UnaryUnaryClientInterceptor = grpc.UnaryUnaryClientInterceptor[Any, Any]
    UnaryStreamClientInterceptor = grpc.UnaryStreamClientInterceptor[Any, Any]
else:
    AioUnaryUnaryClientInterceptor = grpc.aio.UnaryUnaryClientInterceptor
    AioUnaryStreamClientInterceptor = grpc.aio.UnaryStreamClientInterceptor
    UnaryUnaryClientInterceptor = grpc.UnaryUnaryClientInterceptor
    UnaryStreamClientInterceptor = grpc.UnaryStreamClientInterceptor

__all__ = [
    "AioUnaryStreamClientInterceptor",
    "AioUnaryUnaryClientInterceptor",
    "UnaryStreamClientInterceptor",
    "UnaryUnaryClientInterceptor",
]

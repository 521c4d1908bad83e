"""The gRPC client interceptor types the light client subclasses (bearer tokens, client spans).

The gRPC generics are not subscriptable at run time: these aliases are what the client's
interceptors subclass and annotate with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    AioUnaryUnaryClientInterceptor = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    UnaryUnaryClientInterceptor = grpc.UnaryUnaryClientInterceptor[Any, Any]
else:
    AioUnaryUnaryClientInterceptor = grpc.aio.UnaryUnaryClientInterceptor
    UnaryUnaryClientInterceptor = grpc.UnaryUnaryClientInterceptor

__all__ = ["AioUnaryUnaryClientInterceptor", "UnaryUnaryClientInterceptor"]

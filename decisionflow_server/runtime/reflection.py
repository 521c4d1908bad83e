"""gRPC server reflection under both of its names: ``grpc.reflection.v1``, which current tools (grpcurl,
buf curl, Postman) ask first, and ``grpc.reflection.v1alpha``, which older ones ask.

grpcio-reflection (1.85) ships only v1alpha. The v1 protocol is the same messages, with the same field
numbers, in another package, so the bytes on the wire are the same: the v1 service is the v1alpha
implementation registered under the v1 name, as grpc-go and grpc-java serve both. Both names are
announced by ListServices. Reflection needs no credentials (``decisionflow_server.runtime.auth`` exempts both).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
METHOD = "ServerReflectionInfo"


def enable_reflection(
    service_names: Sequence[str], server: grpc.aio.Server, pool: descriptor_pool.DescriptorPool
) -> None:
    """Serve reflection over pool on server under the v1 and v1alpha names; ListServices answers
    service_names and both reflection services."""
    servicer = ReflectionServicer((*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME), pool=pool)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {METHOD: v1}),))

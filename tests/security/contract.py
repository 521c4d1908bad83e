"""The gRPC contract as the generated descriptors describe it: every method of every service, its
request class, a well-formed request per method, and the string fields of each request.

Everything here is derived from ``decisionflow.v1.*_pb2`` at import time, so an RPC or a string
field added to the .proto files is covered by the tests that use it without anyone listing it.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

import decisionflow.v1
from decisionflow.v1 import audit_pb2, common_pb2, effect_receiver_pb2, events_pb2, operations_pb2, review_pb2
from tests.support.payloads import sample_payload
from tests.support.stack import T1042_BODY, policy, start_request

RECEIVER_SERVICE = "decisionflow.v1.EffectReceiverService"
ORCHESTRATOR_SERVICES = (
    "decisionflow.v1.ReviewService",
    "decisionflow.v1.OperationsService",
    "decisionflow.v1.AuditService",
    "decisionflow.v1.EventService",
)


def _contract_modules() -> list[Any]:
    names = [m.name for m in pkgutil.iter_modules(decisionflow.v1.__path__) if m.name.endswith("_pb2")]
    return [importlib.import_module(f"decisionflow.v1.{name}") for name in sorted(names)]


def contract_methods() -> list[MethodDescriptor]:
    """Every method of every service declared in the generated decisionflow.v1 modules."""
    methods: list[MethodDescriptor] = []
    for module in _contract_modules():
        for service in module.DESCRIPTOR.services_by_name.values():
            methods.extend(service.methods)
    return sorted(methods, key=method_path)


def method_path(method: MethodDescriptor) -> str:
    """The full gRPC path of a method: ``/package.Service/Method``."""
    return f"/{method.containing_service.full_name}/{method.name}"


def server_streaming(path: str) -> bool:
    """True when the contract's method at path answers a stream (False for a unary method or a path
    outside the contract)."""
    return path in _STREAMING_PATHS


def request_class(method: MethodDescriptor) -> type[Message]:
    """The generated class of a method's request message."""
    return message_factory.GetMessageClass(method.input_type)


_STREAMING_PATHS = frozenset(method_path(method) for method in contract_methods() if method.server_streaming)


def served_by_receiver(method: MethodDescriptor) -> bool:
    """True for the receiver's methods, False for the orchestrator's; an unknown service fails loudly."""
    service = method.containing_service.full_name
    if service == RECEIVER_SERVICE:
        return True
    assert service in ORCHESTRATOR_SERVICES, f"no test server serves {service}: add it to tests/security/contract.py"
    return False


FRESH_OPERATION_ID = "op-v1-" + hashlib.sha256(b"hostile-tests.fresh").hexdigest()


def apply_request(operation_id: str = FRESH_OPERATION_ID, case_id: str = "T-7001", body: str = "ok") -> Message:
    """A well-formed Apply whose payload matches its fields and digest."""
    payload = sample_payload(
        operation_id,
        case_id,
        body=body,
        evidence_id="ev-v1-" + "0" * 64,
        policy_id="pol-v1-" + "0" * 64,
        reviewer="rita",
        decided_at=datetime(2026, 1, 1, tzinfo=UTC),
    ).encode()
    return effect_receiver_pb2.ApplyRequest(
        operation_id=operation_id,
        case_id=case_id,
        kind="record_support_review",
        payload=payload,
        payload_digest=hashlib.sha256(payload).hexdigest(),
    )


def _settlement(operation_id: str) -> operations_pb2.Settlement:
    return operations_pb2.Settlement(
        operation_id=operation_id,
        status=common_pb2.LOOKUP_STATUS_APPLIED,
        receipt=common_pb2.Receipt(receipt_id="rcpt-" + "0" * 32, operation_id=operation_id),
        consistency=common_pb2.CONSISTENCY_STRONG,
    )


def valid_requests(operation_id: str) -> dict[str, Message]:
    """A well-formed request per method that would write or read something real, about operation_id."""
    edit = review_pb2.EditProposalRequest(
        expected_operation_id=operation_id,
        body=T1042_BODY + " Edited.",
        evidence=list(start_request().evidence),
        policy=policy(),
    )
    requests: dict[str, Message] = {
        "/decisionflow.v1.ReviewService/StartReview": start_request(case_id="T-7001"),
        "/decisionflow.v1.ReviewService/GetProposal": review_pb2.GetProposalRequest(operation_id=operation_id),
        "/decisionflow.v1.ReviewService/EditProposal": edit,
        "/decisionflow.v1.ReviewService/Approve": review_pb2.ApproveRequest(
            operation_id=operation_id, decision=common_pb2.DECISION_APPROVE
        ),
        "/decisionflow.v1.ReviewService/GetOperation": review_pb2.GetOperationRequest(operation_id=operation_id),
        "/decisionflow.v1.ReviewService/ListPendingReviews": review_pb2.ListPendingReviewsRequest(page_size=10),
        "/decisionflow.v1.ReviewService/GetCaller": review_pb2.GetCallerRequest(),
        "/decisionflow.v1.OperationsService/ListOperations": operations_pb2.ListOperationsRequest(page_size=10),
        "/decisionflow.v1.OperationsService/SettleOperation": operations_pb2.SettleOperationRequest(
            settlement=_settlement(operation_id)
        ),
        "/decisionflow.v1.OperationsService/BatchSettleOperations": operations_pb2.BatchSettleOperationsRequest(
            settlements=[_settlement(operation_id)]
        ),
        "/decisionflow.v1.OperationsService/RedriveOperation": operations_pb2.RedriveOperationRequest(
            operation_id=operation_id
        ),
        "/decisionflow.v1.EffectReceiverService/Apply": apply_request(),
        "/decisionflow.v1.EffectReceiverService/Lookup": effect_receiver_pb2.LookupRequest(operation_id=operation_id),
        "/decisionflow.v1.EffectReceiverService/BatchLookup": effect_receiver_pb2.BatchLookupRequest(
            operation_ids=[operation_id]
        ),
        "/decisionflow.v1.EffectReceiverService/ListEffects": effect_receiver_pb2.ListEffectsRequest(
            case_id="T-1042", page_size=10
        ),
        "/decisionflow.v1.AuditService/GetCheckpoint": audit_pb2.GetCheckpointRequest(),
        "/decisionflow.v1.AuditService/GetInclusionProof": audit_pb2.GetInclusionProofRequest(
            operation_id=operation_id
        ),
        "/decisionflow.v1.AuditService/GetConsistencyProof": audit_pb2.GetConsistencyProofRequest(old_size=1),
        "/decisionflow.v1.AuditService/ListLeaves": audit_pb2.ListLeavesRequest(page_size=10),
        "/decisionflow.v1.EventService/WatchEvents": events_pb2.WatchEventsRequest(operation_id=operation_id),
    }
    return requests


def request_for(method: MethodDescriptor, operation_id: str) -> Message:
    """The well-formed request of valid_requests(), or an empty one for a method added since."""
    request = valid_requests(operation_id).get(method_path(method))
    return request if request is not None else request_class(method)()


# A path to one string inside a request: field names, "[0]" for the first element of a repeated
# field, "{key}" / "{value}" for a key or a value of a map<string, string>.
StringPath = tuple[str, ...]


def string_paths(descriptor: Descriptor, prefix: StringPath = ()) -> Iterator[StringPath]:
    """Every string field reachable in a message type (well-known types excepted: they hold none)."""
    for field in descriptor.fields:
        element = ("[0]",) if field.is_repeated else ()
        nested = field.message_type
        if nested is None:
            if field.type == FieldDescriptor.TYPE_STRING:
                yield (*prefix, field.name, *element)
        elif nested.GetOptions().map_entry:
            for part in ("key", "value"):
                if nested.fields_by_name[part].type == FieldDescriptor.TYPE_STRING:
                    yield (*prefix, field.name, "{" + part + "}")
        elif not nested.full_name.startswith("google.protobuf."):
            yield from string_paths(nested, (*prefix, field.name, *element))


def show(path: StringPath) -> str:
    """A path as text, for test ids: ``settlement.receipt.receipt_id``, ``evidence[0].quotation``."""
    return ".".join(path).replace(".[0]", "[0]").replace(".{", "{")


def with_string(request: Message, path: StringPath, value: str) -> Message:
    """A copy of request with the string at path replaced by value (elements created as needed)."""
    copy = type(request)()
    copy.CopyFrom(request)
    target: Any = copy
    steps = list(path)
    while steps:
        name = steps.pop(0)
        container = getattr(target, name)
        if steps and steps[0] in ("{key}", "{value}"):
            if steps[0] == "{key}":
                container[value] = "v"
            else:
                container["k"] = value
            return copy
        if steps and steps[0] == "[0]":
            steps.pop(0)
            if steps:  # a repeated message: descend into its first element
                target = container[0] if len(container) else container.add()
                continue
            if len(container):
                container[0] = value
            else:
                container.append(value)
            return copy
        if steps:
            target = container
        else:
            setattr(target, name, value)
    return copy

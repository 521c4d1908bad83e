"""Every RPC of the contract crossed with {no credentials, bad token, wrong role, right role} against real
servers with authentication on. The methods come from the generated service descriptors, so an
RPC added to a .proto file is in the matrix (and must be in the policy) without being listed here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow.v1 import events_pb2, review_pb2
from decisionflow_server.runtime.auth import RPC_ROLES, CredentialsError, all_rpc_methods, issue_token, load_credentials
from tests.security.contract import contract_methods, method_path, request_class, request_for, served_by_receiver
from tests.security.dbstate import Snapshot, row_counts, snapshot
from tests.support.secure import PRINCIPALS, SINGLE_ROLE_PRINCIPALS, SecureStack, raw_call, start_secure_stack
from tests.support.stack import start_request

METHODS = contract_methods()
REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
WATCH_EVENTS = "/decisionflow.v1.EventService/WatchEvents"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureStack, str]]:
    """Both servers with authentication on, and one pending proposal written by the author."""
    secure = start_secure_stack(tmp_path_factory.mktemp("matrix"))
    try:
        review = secure.stack.review()
        started = review.StartReview(start_request(), metadata=secure.as_("arthur"), timeout=15)
        yield secure, started.proposal.operation_id
    finally:
        secure.close()


def test_the_matrix_covers_exactly_the_rpcs_of_the_contract_and_the_policy() -> None:
    tested = {method_path(method) for method in METHODS}
    assert tested == set(all_rpc_methods())
    assert tested == set(RPC_ROLES)
    assert all(RPC_ROLES[path] for path in tested), "an RPC no role may call"
    # Every method is routed to a server that serves it (served_by_receiver fails on an unknown service).
    assert {served_by_receiver(method) for method in METHODS} == {True, False}
    # raw_call sends one request: a unary one, or one that opens a server stream.
    assert not [method_path(method) for method in METHODS if method.client_streaming]


def test_a_principal_without_roles_cannot_be_issued_or_loaded(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials.json"
    with pytest.raises(CredentialsError):
        issue_token(credentials, "nobody", [])
    assert not credentials.exists()
    credentials.write_text(json.dumps({"tokens": [{"principal": "nobody", "sha256": "0" * 64, "roles": []}]}))
    with pytest.raises(CredentialsError, match="non-empty list of role names"):
        load_credentials(credentials)


def _states(secure: SecureStack) -> tuple[Snapshot, Snapshot]:
    return snapshot(secure.stack.orchestrator_url), snapshot(secure.stack.receiver_url)


@pytest.mark.parametrize("method", METHODS, ids=method_path)
def test_rpc_admits_only_its_roles_and_a_refused_call_writes_nothing(
    seeded: tuple[SecureStack, str], method: MethodDescriptor
) -> None:
    secure, operation_id = seeded
    path = method_path(method)
    channel = secure.channel(served_by_receiver(method))
    # A request that would do real work if admitted, so "nothing written" is not vacuous.
    request = request_for(method, operation_id).SerializeToString()
    allowed = RPC_ROLES[path]
    wrong = [name for name in SINGLE_ROLE_PRINCIPALS if PRINCIPALS[name].isdisjoint(allowed)]
    right = [name for name in PRINCIPALS if not PRINCIPALS[name].isdisjoint(allowed)]
    assert wrong and right

    before = _states(secure)
    unauthenticated = {
        "no credentials": (),
        "unknown token": (("authorization", "Bearer not-a-token-anyone-was-issued"),),
        "other scheme": (("authorization", f"Basic {secure.tokens[right[0]]}"),),
        "empty bearer": (("authorization", "Bearer "),),
        "two tokens": (*secure.as_(right[0]), *secure.as_(right[-1])),
    }
    for what, metadata in unauthenticated.items():
        code, _ = raw_call(channel, path, request, metadata)
        assert code == grpc.StatusCode.UNAUTHENTICATED, (path, what)
    for name in wrong:
        code, _ = raw_call(channel, path, request, secure.as_(name))
        assert code == grpc.StatusCode.PERMISSION_DENIED, (path, name)
    after = _states(secure)
    assert after == before, (path, row_counts(before[0]), row_counts(after[0]))

    empty = request_class(method)().SerializeToString()
    for name in right:
        code, response = raw_call(channel, path, empty, secure.as_(name))
        # Admitted: the empty request may be refused on its merits, never for who sent it.
        assert code not in REFUSALS, (path, name, code)
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (path, code)
        if code == grpc.StatusCode.OK and path == WATCH_EVENTS:
            # A stream's first message (raw_call cancels the stream after it) is its heartbeat.
            assert events_pb2.WatchEventsResponse.FromString(response).HasField("heartbeat"), name


def test_health_needs_no_credentials(seeded: tuple[SecureStack, str]) -> None:
    secure, _ = seeded
    for receiver in (True, False):
        health = health_pb2_grpc.HealthStub(secure.channel(receiver))
        answer = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_admitted_calls_do_real_work(seeded: tuple[SecureStack, str]) -> None:
    secure, operation_id = seeded
    review = secure.stack.review()
    found = review.GetOperation(
        review_pb2.GetOperationRequest(operation_id=operation_id), metadata=secure.as_("olga"), timeout=10
    )
    assert found.operation.operation_id == operation_id
    proposal = review.GetProposal(
        review_pb2.GetProposalRequest(operation_id=operation_id), metadata=secure.as_("rita"), timeout=10
    )
    assert proposal.proposal.created_by == "arthur"

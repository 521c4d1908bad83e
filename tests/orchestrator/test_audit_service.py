"""The AuditService over real gRPC, on an orchestrator with authentication on, reading an in-memory log
(tests.support.audit_log: real leaves, real proofs, a real Ed25519 key): checkpoints open with the
log's verifier key, every proof verifies against the checkpoint it names, pages of leaves stay under
the message limit and of one tree, each bad request is refused naming what is wrong, and only
auditors and operators may read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from decisionflow import reasons
from decisionflow.channels import MAX_MESSAGE_BYTES
from decisionflow.status_details import error_info
from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    NoteVerifier,
    leaf_hash,
    open_checkpoint,
    verify_consistency,
    verify_inclusion,
)
from decisionflow.v1 import audit_pb2, audit_pb2_grpc
from decisionflow.vocabulary import OperationId
from tests.support.audit_log import AT, ORIGIN, InMemoryAuditLog, sample_proposal
from tests.support.secure import SecureStack, start_secure_stack

A = sample_proposal("T-1", "Known issue; update to 4.2.1.")
B = sample_proposal("T-1", "Known issue; update to 4.2.2.", principal="ben")
C = sample_proposal("T-2", "Please send the diagnostic export.")
D = sample_proposal("T-3", "Signed after the latest checkpoint.")
UNKNOWN = OperationId("op-v1-" + "0" * 64)
BIG = 300 * 1024
FIRST, LATEST = 5, 9


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    """An orchestrator with authentication on, over a log of 10 leaves: checkpoints at 5 and 9, one unsigned.

    0 proposal A (T-1)   1 proposal B (T-1)   2 decision A   3 proposal C (T-2)   4 effect A
    5 decision C         6, 7, 8: 300 KiB each (not leaves any writer makes)      9 proposal D (T-3)
    """
    log = InMemoryAuditLog()
    stack = start_secure_stack(tmp_path_factory.mktemp("audit"), audit_log=log)
    for leaf in (
        A,
        B,
        DecisionLeaf(AT, A.operation_id, "APPROVE", "rita"),
        C,
        EffectLeaf(AT, A.operation_id, "r-1", AT),
    ):
        log.append(leaf)
    log.sign()
    log.append(DecisionLeaf(AT, C.operation_id, "DECLINE", "rita"))
    for filler in (b"x", b"y", b"z"):
        log.append(filler * BIG)
    log.sign()
    log.append(D)
    try:
        yield stack
    finally:
        stack.close()


def _audit(secure: SecureStack) -> audit_pb2_grpc.AuditServiceStub:
    return audit_pb2_grpc.AuditServiceStub(secure.channel(False))


def _call(secure: SecureStack, method: str, request: Any, principal: str | None = "audrey") -> Any:
    metadata = () if principal is None else secure.as_(principal)
    return getattr(_audit(secure), method)(request, metadata=metadata, timeout=15)


def _refusal(secure: SecureStack, method: str, request: Any, principal: str | None = "audrey") -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        _call(secure, method, request, principal)
    return refused.value


def _log(secure: SecureStack) -> InMemoryAuditLog:
    return secure.stack.fake_audit_log()


def test_checkpoints_open_with_the_log_key_latest_and_at_a_size(secure: SecureStack) -> None:
    key = NoteVerifier.from_vkey(_log(secure).vkey)

    latest = _call(secure, "GetCheckpoint", audit_pb2.GetCheckpointRequest()).checkpoint
    first = _call(secure, "GetCheckpoint", audit_pb2.GetCheckpointRequest(tree_size=FIRST)).checkpoint

    opened = open_checkpoint(latest.signed_note, [key], origin=ORIGIN)
    assert (opened.size, opened.root_hash) == (latest.tree_size, latest.root_hash) == (LATEST, latest.root_hash)
    assert open_checkpoint(first.signed_note, [key], origin=ORIGIN).size == first.tree_size == FIRST
    assert latest.signed_at.seconds > 0
    for unsigned in (7, 10, 2**64 - 1):
        error = _refusal(secure, "GetCheckpoint", audit_pb2.GetCheckpointRequest(tree_size=unsigned))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert error_info(error)[:2] == (reasons.NOT_FOUND, {reasons.TREE_SIZE: str(unsigned)})


def _verified(response: audit_pb2.GetInclusionProofResponse) -> list[int]:
    """Verify every proof of a response against its checkpoint's root; return the leaf indices."""
    assert response.checkpoint.tree_size == response.tree_size
    for proof in response.proofs:
        verify_inclusion(
            proof.leaf.index,
            response.tree_size,
            leaf_hash(proof.leaf.data),
            proof.hashes,
            response.checkpoint.root_hash,
        )
    return [proof.leaf.index for proof in response.proofs]


def test_inclusion_proofs_of_a_leaf_an_operation_and_a_case_verify(secure: SecureStack) -> None:
    log = _log(secure)

    one = _call(secure, "GetInclusionProof", audit_pb2.GetInclusionProofRequest(leaf_index=2))
    earlier = _call(secure, "GetInclusionProof", audit_pb2.GetInclusionProofRequest(leaf_index=2, tree_size=FIRST))
    operation = _call(secure, "GetInclusionProof", audit_pb2.GetInclusionProofRequest(operation_id=A.operation_id))
    case = _call(secure, "GetInclusionProof", audit_pb2.GetInclusionProofRequest(case_id="T-1"))
    declined = _call(secure, "GetInclusionProof", audit_pb2.GetInclusionProofRequest(operation_id=C.operation_id))
    before = _call(
        secure, "GetInclusionProof", audit_pb2.GetInclusionProofRequest(operation_id=C.operation_id, tree_size=FIRST)
    )

    assert (one.tree_size, _verified(one)) == (LATEST, [2])
    assert (earlier.tree_size, _verified(earlier)) == (FIRST, [2])
    assert _verified(operation) == [0, 2, 4]
    assert _verified(case) == [0, 1, 2, 4]
    assert _verified(declined) == [3, 5]
    assert _verified(before) == [3]  # its decision came after the first checkpoint
    assert [proof.leaf.data for proof in case.proofs] == [leaf.data for leaf in log.leaves(0, 5) if leaf.index != 3]
    assert not case.next_page_token


def test_an_operations_proofs_come_a_page_at_a_time(secure: SecureStack) -> None:
    request = audit_pb2.GetInclusionProofRequest(case_id="T-1", page_size=1)
    pages = []
    while True:
        response = _call(secure, "GetInclusionProof", request)
        pages.append(_verified(response))
        if not response.next_page_token:
            break
        request.page_token = response.next_page_token
    assert pages == [[0], [1], [2], [4]]


def test_a_consistency_proof_links_the_first_checkpoint_to_the_latest(secure: SecureStack) -> None:
    first = _call(secure, "GetCheckpoint", audit_pb2.GetCheckpointRequest(tree_size=FIRST)).checkpoint

    answer = _call(secure, "GetConsistencyProof", audit_pb2.GetConsistencyProofRequest(old_size=FIRST))
    same = _call(secure, "GetConsistencyProof", audit_pb2.GetConsistencyProofRequest(old_size=FIRST, new_size=FIRST))

    assert (answer.old_size, answer.new_size, answer.checkpoint.tree_size) == (FIRST, LATEST, LATEST)
    verify_consistency(FIRST, LATEST, answer.hashes, first.root_hash, answer.checkpoint.root_hash)
    assert (list(same.hashes), same.checkpoint.root_hash) == ([], first.root_hash)


def test_leaves_are_listed_in_pages_under_the_message_limit_and_of_one_tree(secure: SecureStack) -> None:
    request = audit_pb2.ListLeavesRequest()
    pages: list[audit_pb2.ListLeavesResponse] = []
    while True:
        pages.append(_call(secure, "ListLeaves", request))
        if not pages[-1].next_page_token:
            break
        request.page_token = pages[-1].next_page_token

    listed = [leaf for page in pages for leaf in page.leaves]
    assert [(leaf.index, leaf.data) for leaf in listed] == [
        (leaf.index, leaf.data) for leaf in _log(secure).leaves(0, 9)
    ]
    assert {page.tree_size for page in pages} == {LATEST}
    # Two 300 KiB leaves fit a page; a third would pass the budget.
    assert [[leaf.index for leaf in page.leaves] for page in pages] == [[0, 1, 2, 3, 4, 5, 6, 7], [8]]
    assert all(page.ByteSize() < MAX_MESSAGE_BYTES for page in pages)

    # A token resumes the tree of its first page, even when the request no longer names it.
    earlier = _call(secure, "ListLeaves", audit_pb2.ListLeavesRequest(tree_size=FIRST, page_size=2))
    rest = _call(secure, "ListLeaves", audit_pb2.ListLeavesRequest(page_token=earlier.next_page_token))
    assert (rest.tree_size, [leaf.index for leaf in rest.leaves]) == (FIRST, [2, 3, 4])
    assert not rest.next_page_token


def _violation(error: grpc.RpcError) -> list[str]:
    _, _, violations = error_info(error)
    return [violation.field for violation in violations]


BAD_REQUESTS = [
    ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(), "leaf_index"),
    ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(leaf_index=FIRST, tree_size=FIRST), "leaf_index"),
    ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(operation_id="op-v1-xyz"), "operation_id"),
    ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(case_id="T 1"), "case_id"),
    ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(case_id="T-1", page_size=1001), "page_size"),
    ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(case_id="T-1", page_token="nonsense"), "page_token"),
    ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(leaf_index=1, page_token="x"), "page_token"),
    ("GetConsistencyProof", audit_pb2.GetConsistencyProofRequest(), "old_size"),
    ("GetConsistencyProof", audit_pb2.GetConsistencyProofRequest(old_size=6, new_size=FIRST), "old_size"),
    ("ListLeaves", audit_pb2.ListLeavesRequest(page_size=-1), "page_size"),
    ("ListLeaves", audit_pb2.ListLeavesRequest(page_token="bm90IGEgdG9rZW4="), "page_token"),
]


@pytest.mark.parametrize(("method", "request_", "field"), BAD_REQUESTS, ids=[f"{m}:{f}" for m, _, f in BAD_REQUESTS])
def test_a_malformed_request_is_refused_naming_the_field(
    secure: SecureStack, method: str, request_: Any, field: str
) -> None:
    error = _refusal(secure, method, request_)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _violation(error) == [field]


def test_a_page_token_is_good_only_for_the_request_that_issued_it(secure: SecureStack) -> None:
    proofs = _call(secure, "GetInclusionProof", audit_pb2.GetInclusionProofRequest(case_id="T-1", page_size=1))
    leaves = _call(secure, "ListLeaves", audit_pb2.ListLeavesRequest(page_size=1))
    misused = [
        ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(case_id="T-1", page_token=leaves.next_page_token)),
        ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(case_id="T-2", page_token=proofs.next_page_token)),
        ("ListLeaves", audit_pb2.ListLeavesRequest(page_token=proofs.next_page_token)),
        ("ListLeaves", audit_pb2.ListLeavesRequest(tree_size=FIRST, page_token=leaves.next_page_token)),
    ]
    for method, request in misused:
        error = _refusal(secure, method, request)
        assert (error.code(), _violation(error)) == (grpc.StatusCode.INVALID_ARGUMENT, ["page_token"]), request


BEYOND = [
    (audit_pb2.GetInclusionProofRequest(leaf_index=LATEST), {reasons.TREE_SIZE: "9", reasons.LEAF_INDEX: "9"}),
    (audit_pb2.GetInclusionProofRequest(leaf_index=0, tree_size=12), {reasons.TREE_SIZE: "12"}),
    (
        audit_pb2.GetInclusionProofRequest(operation_id=D.operation_id),
        {reasons.TREE_SIZE: "9", reasons.OPERATION_ID: D.operation_id},
    ),
    (audit_pb2.GetInclusionProofRequest(case_id="T-3"), {reasons.TREE_SIZE: "9", reasons.CASE_ID: "T-3"}),
    (audit_pb2.GetConsistencyProofRequest(old_size=1, new_size=12), {reasons.TREE_SIZE: "12"}),
    (audit_pb2.GetConsistencyProofRequest(old_size=10), {reasons.TREE_SIZE: "10"}),
    (audit_pb2.ListLeavesRequest(tree_size=2**64 - 1), {reasons.TREE_SIZE: str(2**64 - 1)}),
]


@pytest.mark.parametrize(("request_", "named"), BEYOND, ids=[str(i) for i in range(len(BEYOND))])
def test_what_no_checkpoint_covers_yet_is_refused_with_the_latest_size(
    secure: SecureStack, request_: Any, named: dict[str, str]
) -> None:
    method = type(request_).__name__.removesuffix("Request")
    error = _refusal(secure, method, request_)
    reason, metadata, _ = error_info(error)
    assert (error.code(), reason) == (grpc.StatusCode.FAILED_PRECONDITION, reasons.BEYOND_CHECKPOINT)
    assert metadata == {reasons.CHECKPOINT_SIZE: "9", **named}


def test_an_operation_or_case_without_leaves_is_not_found(secure: SecureStack) -> None:
    for request, named in (
        (audit_pb2.GetInclusionProofRequest(operation_id=UNKNOWN), {reasons.OPERATION_ID: UNKNOWN}),
        (audit_pb2.GetInclusionProofRequest(case_id="T-9"), {reasons.CASE_ID: "T-9"}),
    ):
        error = _refusal(secure, "GetInclusionProof", request)
        assert (error.code(), *error_info(error)[:2]) == (grpc.StatusCode.NOT_FOUND, reasons.NOT_FOUND, named)


READS = [
    ("GetCheckpoint", audit_pb2.GetCheckpointRequest()),
    ("GetInclusionProof", audit_pb2.GetInclusionProofRequest(leaf_index=0)),
    ("GetConsistencyProof", audit_pb2.GetConsistencyProofRequest(old_size=1)),
    ("ListLeaves", audit_pb2.ListLeavesRequest(page_size=1)),
]


@pytest.mark.parametrize(("method", "request_"), READS, ids=[m for m, _ in READS])
def test_auditors_and_operators_read_the_log_and_nobody_else(secure: SecureStack, method: str, request_: Any) -> None:
    for principal in ("audrey", "olga"):
        assert _call(secure, method, request_, principal).ByteSize() > 0, principal
    for principal in ("rita", "arthur", "walter", "edna"):
        error = _refusal(secure, method, request_, principal)
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, principal
        reason, metadata, _ = error_info(error)
        assert (reason, metadata[reasons.RPC]) == (reasons.PERMISSION_DENIED, f"/decisionflow.v1.AuditService/{method}")
    assert _refusal(secure, method, request_, None).code() == grpc.StatusCode.UNAUTHENTICATED

"""AuditClient and AsyncAuditClient: the orchestrator's AuditService (roles auditor or operator).

Both build the same requests and read the same answers through the one call seam
(``decisionflow.client._calls``): deadlines, retries of transient failures, typed errors. Every call
only reads, so every call is safe to repeat. What they return is to be checked, not believed:
open a checkpoint with the log's verifier key and verify proofs against it (``verify_operation``,
``decisionflow.transparency``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from functools import cached_property

from decisionflow.client._calls import AsyncClient, Client, call, call_async
from decisionflow.client.audit_views import (
    AuditLeaf,
    ConsistencyProof,
    InclusionProofs,
    LeafInclusion,
    SignedCheckpoint,
)
from decisionflow.timestamps import from_timestamp
from decisionflow.v1 import audit_pb2, audit_pb2_grpc


def _checkpoint(message: audit_pb2.SignedCheckpoint) -> SignedCheckpoint:
    signed_at = from_timestamp(message.signed_at) if message.HasField("signed_at") else None
    return SignedCheckpoint(message.tree_size, message.root_hash, message.signed_note, signed_at)


def _optional_checkpoint(
    owner: audit_pb2.GetInclusionProofResponse | audit_pb2.GetConsistencyProofResponse,
) -> SignedCheckpoint | None:
    return _checkpoint(owner.checkpoint) if owner.HasField("checkpoint") else None


def _leaf(message: audit_pb2.AuditLeaf) -> AuditLeaf:
    return AuditLeaf(message.index, message.data)


def _proofs_request(
    leaf_index: int | None, operation_id: str | None, case_id: str | None, tree_size: int, page_size: int
) -> audit_pb2.GetInclusionProofRequest:
    named = [
        name
        for name, value in (("leaf_index", leaf_index), ("operation_id", operation_id), ("case_id", case_id))
        if value is not None
    ]
    if len(named) != 1:
        raise ValueError("name the leaves to prove: exactly one of leaf_index, operation_id and case_id")
    request = audit_pb2.GetInclusionProofRequest(tree_size=tree_size, page_size=page_size)
    if leaf_index is not None:
        request.leaf_index = leaf_index
    elif operation_id is not None:
        request.operation_id = operation_id
    else:
        request.case_id = case_id or ""
    return request


class _Proofs:
    """The pages of one GetInclusionProof, gathered into one answer (each page of the same tree)."""

    def __init__(self) -> None:
        self.tree_size = 0
        self.checkpoint: SignedCheckpoint | None = None
        self.proofs: list[LeafInclusion] = []

    def add(self, response: audit_pb2.GetInclusionProofResponse) -> None:
        self.tree_size = response.tree_size
        self.checkpoint = self.checkpoint or _optional_checkpoint(response)
        self.proofs += [LeafInclusion(_leaf(p.leaf), tuple(p.hashes)) for p in response.proofs]

    def answer(self) -> InclusionProofs:
        return InclusionProofs(self.tree_size, self.checkpoint, tuple(self.proofs))


def _consistency(response: audit_pb2.GetConsistencyProofResponse) -> ConsistencyProof:
    return ConsistencyProof(
        response.old_size, response.new_size, tuple(response.hashes), _optional_checkpoint(response)
    )


class AuditClient(Client):
    """Synchronous client of AuditService: checkpoints, inclusion and consistency proofs, the leaves."""

    @cached_property
    def _stub(self) -> audit_pb2_grpc.AuditServiceStub:
        return audit_pb2_grpc.AuditServiceStub(self._channel)

    def get_checkpoint(self, tree_size: int = 0) -> SignedCheckpoint:
        """The latest signed checkpoint (tree_size 0), or the one signed at tree_size; NotFound when none was."""
        request = audit_pb2.GetCheckpointRequest(tree_size=tree_size)
        return _checkpoint(call(self._stub.GetCheckpoint, request, self._settings).checkpoint)

    def inclusion_proofs(
        self,
        *,
        leaf_index: int | None = None,
        operation_id: str | None = None,
        case_id: str | None = None,
        tree_size: int = 0,
        page_size: int = 0,
    ) -> InclusionProofs:
        """The proofs of one leaf, or of every leaf of an operation or a case, in the tree of tree_size leaves
        (0: the latest checkpoint's); every page is fetched, each call retried on its own."""
        request = _proofs_request(leaf_index, operation_id, case_id, tree_size, page_size)
        gathered = _Proofs()
        while True:
            response = call(self._stub.GetInclusionProof, request, self._settings)
            gathered.add(response)
            if not response.next_page_token:
                return gathered.answer()
            request.page_token = response.next_page_token

    def consistency_proof(self, old_size: int, new_size: int = 0) -> ConsistencyProof:
        """The proof that the tree of new_size leaves (0: the latest checkpoint's) extends the tree of old_size."""
        request = audit_pb2.GetConsistencyProofRequest(old_size=old_size, new_size=new_size)
        return _consistency(call(self._stub.GetConsistencyProof, request, self._settings))

    def list_leaves(self, tree_size: int, *, page_size: int = 0) -> Iterator[AuditLeaf]:
        """Yield the leaves of the tree of tree_size leaves (a checkpoint's size) in index order; pages are
        fetched as the iterator advances, each retried on its own."""
        request = audit_pb2.ListLeavesRequest(tree_size=tree_size, page_size=page_size)
        while True:
            response = call(self._stub.ListLeaves, request, self._settings)
            yield from (_leaf(leaf) for leaf in response.leaves)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token


class AsyncAuditClient(AsyncClient):
    """asyncio client of AuditService on a ``grpc.aio`` channel: the methods, deadlines, retry policy and
    typed errors of ``AuditClient``, awaited."""

    @cached_property
    def _stub(self) -> audit_pb2_grpc.AuditServiceAsyncStub:
        return audit_pb2_grpc.AuditServiceStub(self._channel)

    async def get_checkpoint(self, tree_size: int = 0) -> SignedCheckpoint:
        """The latest signed checkpoint (tree_size 0), or the one signed at tree_size; NotFound when none was."""
        request = audit_pb2.GetCheckpointRequest(tree_size=tree_size)
        return _checkpoint((await call_async(self._stub.GetCheckpoint, request, self._settings)).checkpoint)

    async def inclusion_proofs(
        self,
        *,
        leaf_index: int | None = None,
        operation_id: str | None = None,
        case_id: str | None = None,
        tree_size: int = 0,
        page_size: int = 0,
    ) -> InclusionProofs:
        """The proofs of one leaf, or of every leaf of an operation or a case (every page fetched)."""
        request = _proofs_request(leaf_index, operation_id, case_id, tree_size, page_size)
        gathered = _Proofs()
        while True:
            response = await call_async(self._stub.GetInclusionProof, request, self._settings)
            gathered.add(response)
            if not response.next_page_token:
                return gathered.answer()
            request.page_token = response.next_page_token

    async def consistency_proof(self, old_size: int, new_size: int = 0) -> ConsistencyProof:
        """The proof that the tree of new_size leaves (0: the latest checkpoint's) extends the tree of old_size."""
        request = audit_pb2.GetConsistencyProofRequest(old_size=old_size, new_size=new_size)
        return _consistency(await call_async(self._stub.GetConsistencyProof, request, self._settings))

    async def list_leaves(self, tree_size: int, *, page_size: int = 0) -> AsyncIterator[AuditLeaf]:
        """Yield the leaves of the tree of tree_size leaves in index order, a page at a time."""
        request = audit_pb2.ListLeavesRequest(tree_size=tree_size, page_size=page_size)
        while True:
            response = await call_async(self._stub.ListLeaves, request, self._settings)
            for leaf in response.leaves:
                yield _leaf(leaf)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

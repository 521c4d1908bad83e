"""The AuditService servicer: proto ↔ the audit log's use cases (orchestrator.audit.service).

Request fields are checked here and refused as InvalidRequest naming the field; what depends on
the log (a size beyond the latest checkpoint, an operation without leaves) is the use cases'
refusal. Page tokens carry the tree size of the first page, so every page of a listing is of the
same tree however many checkpoints are signed meanwhile.
"""

from __future__ import annotations

from typing import Any

import grpc

from decisionflow.v1 import audit_pb2, audit_pb2_grpc
from decisionflow_server.foundation import page_tokens
from decisionflow_server.foundation.errors import FieldViolation, InvalidRequest
from orchestrator.audit.service import AuditLog, LeafProof, Selection
from orchestrator.audit_log.ports import LoggedLeaf, PublishedCheckpoint
from orchestrator.validation import check_case_id, check_operation_id
from orchestrator.wire import to_timestamp

MAX_PAGE = 1000
DEFAULT_PAGE = 100
# The listings' names in their page tokens, so a token of one is refused by the other.
LEAF_LISTING = "audit_leaves"
PROOF_LISTING = "audit_proofs"

Context = grpc.aio.ServicerContext[Any, Any]


def _page_size(page_size: int) -> int:
    if not 0 <= page_size <= MAX_PAGE:
        raise InvalidRequest([FieldViolation("page_size", f"must be 0 to {MAX_PAGE}")])
    return page_size or DEFAULT_PAGE


def _bad_token() -> InvalidRequest:
    return InvalidRequest([FieldViolation("page_token", "not a token from a previous response of this request")])


def _token_position(listing: str, token: str, arity: int) -> list[object]:
    try:
        return page_tokens.decode(listing, token, arity)
    except ValueError as exc:
        raise _bad_token() from exc


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad_token()
    return value


def _resumed_size(asked: int, from_token: int) -> int:
    # A token resumes its own tree; a request may repeat that size but not name another.
    if from_token == 0 or asked not in (0, from_token):
        raise _bad_token()
    return from_token


def checkpoint_to_pb(checkpoint: PublishedCheckpoint) -> audit_pb2.SignedCheckpoint:
    """The wire form of a published checkpoint."""
    return audit_pb2.SignedCheckpoint(
        tree_size=checkpoint.size,
        root_hash=checkpoint.root_hash,
        signed_note=checkpoint.signed_note,
        signed_at=to_timestamp(checkpoint.signed_at),
    )


def _leaf_to_pb(leaf: LoggedLeaf) -> audit_pb2.AuditLeaf:
    return audit_pb2.AuditLeaf(index=leaf.index, data=leaf.data)


def _proof_to_pb(proof: LeafProof) -> audit_pb2.InclusionProof:
    return audit_pb2.InclusionProof(leaf=_leaf_to_pb(proof.leaf), hashes=proof.hashes)


def _selection(request: audit_pb2.GetInclusionProofRequest) -> tuple[Selection, str]:
    """The leaves the request names, and how a page token spells them ("" for one leaf)."""
    chosen = request.WhichOneof("leaves")
    if chosen == "leaf_index":
        if request.tree_size and request.leaf_index >= request.tree_size:
            raise InvalidRequest([FieldViolation("leaf_index", "must be below tree_size")])
        if request.page_token:
            raise InvalidRequest([FieldViolation("page_token", "one leaf's proof has no further page")])
        return Selection(leaf_index=request.leaf_index), ""
    if chosen == "operation_id":
        operation_id = check_operation_id(request.operation_id)
        return Selection(operation_id=operation_id), "operation:" + operation_id
    if chosen == "case_id":
        case_id = check_case_id(request.case_id)
        return Selection(case_id=case_id), "case:" + case_id
    raise InvalidRequest([FieldViolation("leaf_index", "name the leaves: one of leaf_index, operation_id, case_id")])


class AuditServicer(audit_pb2_grpc.AuditServiceServicer):
    """decisionflow.v1.AuditService over the audit log's reader."""

    def __init__(self, log: AuditLog) -> None:
        self._log = log

    async def GetCheckpoint(
        self, request: audit_pb2.GetCheckpointRequest, context: Context
    ) -> audit_pb2.GetCheckpointResponse:
        """Return the latest checkpoint, or the one signed at tree_size."""
        checkpoint = await self._log.checkpoint(request.tree_size)
        return audit_pb2.GetCheckpointResponse(checkpoint=checkpoint_to_pb(checkpoint))

    async def GetInclusionProof(
        self, request: audit_pb2.GetInclusionProofRequest, context: Context
    ) -> audit_pb2.GetInclusionProofResponse:
        """Return the inclusion proofs of one leaf, or of a page of an operation's or a case's leaves."""
        selection, spelled = _selection(request)
        limit = _page_size(request.page_size)
        tree_size, after = request.tree_size, None
        if request.page_token:
            named, from_token, last = _token_position(PROOF_LISTING, request.page_token, 3)
            if named != spelled:
                raise _bad_token()
            tree_size, after = _resumed_size(tree_size, _count(from_token)), _count(last)
        page = await self._log.inclusion_proofs(selection, tree_size, after, limit)
        token = ""
        if page.more:
            token = page_tokens.encode(PROOF_LISTING, spelled, page.tree_size, page.proofs[-1].leaf.index)
        return audit_pb2.GetInclusionProofResponse(
            tree_size=page.tree_size,
            checkpoint=None if page.checkpoint is None else checkpoint_to_pb(page.checkpoint),
            proofs=[_proof_to_pb(proof) for proof in page.proofs],
            next_page_token=token,
        )

    async def GetConsistencyProof(
        self, request: audit_pb2.GetConsistencyProofRequest, context: Context
    ) -> audit_pb2.GetConsistencyProofResponse:
        """Return the proof that the tree of new_size leaves extends the tree of old_size leaves."""
        if request.old_size == 0:
            raise InvalidRequest([FieldViolation("old_size", "must be at least 1: every tree extends the empty one")])
        if request.new_size and request.old_size > request.new_size:
            raise InvalidRequest([FieldViolation("old_size", "must not be above new_size")])
        answer = await self._log.consistency_proof(request.old_size, request.new_size)
        return audit_pb2.GetConsistencyProofResponse(
            old_size=answer.old_size,
            new_size=answer.new_size,
            hashes=answer.hashes,
            checkpoint=None if answer.checkpoint is None else checkpoint_to_pb(answer.checkpoint),
        )

    async def ListLeaves(self, request: audit_pb2.ListLeavesRequest, context: Context) -> audit_pb2.ListLeavesResponse:
        """Return a page of the leaves of the tree of tree_size leaves, in index order."""
        limit = _page_size(request.page_size)
        tree_size, start = request.tree_size, 0
        if request.page_token:
            from_token, start_at = _token_position(LEAF_LISTING, request.page_token, 2)
            tree_size, start = _resumed_size(tree_size, _count(from_token)), _count(start_at)
        page = await self._log.leaves(tree_size, start, limit)
        token = page_tokens.encode(LEAF_LISTING, page.tree_size, page.leaves[-1].index + 1) if page.more else ""
        return audit_pb2.ListLeavesResponse(
            tree_size=page.tree_size, leaves=[_leaf_to_pb(leaf) for leaf in page.leaves], next_page_token=token
        )

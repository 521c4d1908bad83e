"""The audit log's refusals. Each maps to one status in orchestrator.grpc_api.STATUS_TABLE.

Sizes and indices travel in the metadata as decimal text (``tree_size``, ``leaf_index``,
``checkpoint_size``); a malformed request is an ``InvalidRequest`` like any other.

OrchestratorError (orchestrator.errors)
└── AuditLogError
    ├── CheckpointNotFound   no checkpoint was signed at that size (none yet)     NOT_FOUND
    ├── NotLogged            no leaf of the operation or case is in the log       NOT_FOUND
    └── BeyondCheckpoint     asked beyond the tree size asked, or the latest      FAILED_PRECONDITION
                             checkpoint's: ask again once a checkpoint covers it
"""

from __future__ import annotations

from decisionflow import reasons
from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.errors import OrchestratorError


class AuditLogError(OrchestratorError):
    """Base of the audit log's refusals."""


class CheckpointNotFound(AuditLogError):
    """No checkpoint was signed at tree_size; with tree_size None, none was signed yet."""

    reason = reasons.NOT_FOUND

    def __init__(self, tree_size: int | None) -> None:
        if tree_size is None:
            super().__init__("the audit log has signed no checkpoint yet")
        else:
            super().__init__(
                f"the audit log signed no checkpoint at tree size {tree_size}",
                metadata={reasons.TREE_SIZE: str(tree_size)},
            )
        self.tree_size = tree_size


class NotLogged(AuditLogError):
    """No leaf of the operation (or of any operation of the case) is in the log."""

    reason = reasons.NOT_FOUND

    def __init__(self, *, operation_id: OperationId | None = None, case_id: CaseId | None = None) -> None:
        if operation_id is not None:
            super().__init__(
                f"the audit log holds no leaf of operation {operation_id}",
                metadata={reasons.OPERATION_ID: operation_id},
            )
        else:
            super().__init__(
                f"the audit log holds no leaf of case {case_id}", metadata={reasons.CASE_ID: case_id or ""}
            )
        self.operation_id = operation_id
        self.case_id = case_id


class BeyondCheckpoint(AuditLogError):
    """What was asked lies beyond the tree size asked, or the latest checkpoint's; checkpoint_size is the latest's."""

    reason = reasons.BEYOND_CHECKPOINT

    def __init__(
        self,
        checkpoint_size: int,
        *,
        tree_size: int | None = None,
        leaf_index: int | None = None,
        operation_id: OperationId | None = None,
        case_id: CaseId | None = None,
    ) -> None:
        named = {
            reasons.TREE_SIZE: None if tree_size is None else str(tree_size),
            reasons.LEAF_INDEX: None if leaf_index is None else str(leaf_index),
            reasons.OPERATION_ID: operation_id,
            reasons.CASE_ID: case_id,
        }
        metadata = {reasons.CHECKPOINT_SIZE: str(checkpoint_size)}
        metadata.update({key: value for key, value in named.items() if value is not None})
        super().__init__(
            f"{_what(tree_size, leaf_index, operation_id, case_id)}; {_covered(checkpoint_size)}", metadata=metadata
        )
        self.checkpoint_size = checkpoint_size
        self.tree_size = tree_size
        self.leaf_index = leaf_index
        self.operation_id = operation_id
        self.case_id = case_id


def _what(
    tree_size: int | None, leaf_index: int | None, operation_id: OperationId | None, case_id: CaseId | None
) -> str:
    within = "" if tree_size is None else f" within the first {tree_size} leaves"
    if leaf_index is not None:
        return f"leaf {leaf_index} is not in the tree of {tree_size} leaves"
    if operation_id is not None:
        return f"no leaf of operation {operation_id} is{within} of the audit log"
    if case_id is not None:
        return f"no leaf of case {case_id} is{within} of the audit log"
    return f"the audit log's tree size {tree_size} is not signed yet"


def _covered(checkpoint_size: int) -> str:
    if checkpoint_size == 0:
        return "no checkpoint is signed yet: ask again once one is"
    return f"the latest checkpoint covers {checkpoint_size} leaves: ask again once one covers it"

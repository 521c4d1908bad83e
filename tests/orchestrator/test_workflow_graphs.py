"""Built workflow graphs are reused for resumes, one run at a time, and each run answers its own operation."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from orchestrator.checkpoints import CheckpointSealer, RunCheckpoints
from orchestrator.domain import SealedCheckpoint
from orchestrator.workflow import ReviewAnswer, ReviewRequest, ReviewTask, ReviewWorkflow

KEY = b"k" * 32


class _Table:
    """The checkpoint table seam: rows written by earlier requests, by id."""

    def __init__(self) -> None:
        self.rows: dict[str, SealedCheckpoint] = {}

    def get(self, checkpoint_id: str) -> SealedCheckpoint | None:
        return self.rows.get(checkpoint_id)


def _now() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)


async def _open(workflow: ReviewWorkflow, table: _Table, sealer: CheckpointSealer, operation_id: str) -> str:
    run = RunCheckpoints(table, sealer, operation_id, _now)
    checkpoint_id = await workflow.open(ReviewTask(operation_id, f"case-{operation_id}"), run)
    for sealed in run.take_pending(checkpoint_id):
        table.rows[sealed.checkpoint_id] = sealed
    return checkpoint_id


async def _resume(
    workflow: ReviewWorkflow,
    table: _Table,
    sealer: CheckpointSealer,
    operation_id: str,
    checkpoint_id: str,
    fail: bool = False,
) -> tuple[ReviewRequest, ReviewAnswer]:
    run = RunCheckpoints(table, sealer, operation_id, _now)
    checkpoint = run.admit(table.get(checkpoint_id))
    seen: list[ReviewRequest] = []

    async def commit(answer: ReviewAnswer) -> ReviewAnswer:
        await asyncio.sleep(0)  # let other runs interleave
        if fail:
            raise RuntimeError("commit failed")
        return answer

    answer = ReviewAnswer(operation_id, "APPROVE", f"reviewer-{operation_id}")
    result = await workflow.resume_and_answer(checkpoint_id, checkpoint, answer, run, seen.append, commit)
    return seen[0], result


def test_resumes_reuse_graphs_and_each_commits_its_own_answer() -> None:
    async def scenario() -> None:
        workflow, table, sealer = ReviewWorkflow(), _Table(), CheckpointSealer([KEY])
        ids = [f"op-{i}" for i in range(6)]
        checkpoints = {op: await _open(workflow, table, sealer, op) for op in ids}
        built_by_opens = workflow.graphs_built
        assert built_by_opens == 1 + len(ids)  # the identity probe, then one fresh graph per open

        # Sequential and concurrent resumes on the graphs the opens left idle: none is built.
        for op in ids[:2]:
            request, answer = await _resume(workflow, table, sealer, op, checkpoints[op])
            assert (request.operation_id, answer.operation_id, answer.reviewer) == (op, op, f"reviewer-{op}")
        results = await asyncio.gather(*(_resume(workflow, table, sealer, op, checkpoints[op]) for op in ids[2:]))
        for op, (request, answer) in zip(ids[2:], results, strict=True):
            assert (request.operation_id, answer.operation_id, answer.reviewer) == (op, op, f"reviewer-{op}")
        assert workflow.graphs_built == built_by_opens

        # A resume of an operation already answered on a reused graph still restores its own request.
        request, answer = await _resume(workflow, table, sealer, ids[0], checkpoints[ids[0]])
        assert request.operation_id == answer.operation_id == ids[0]

    asyncio.run(scenario())


def test_a_graph_whose_run_failed_is_not_reused() -> None:
    async def scenario() -> None:
        workflow, table, sealer = ReviewWorkflow(), _Table(), CheckpointSealer([KEY])
        checkpoint_a = await _open(workflow, table, sealer, "op-a")  # leaves one idle graph
        built = workflow.graphs_built
        with pytest.raises(RuntimeError, match="commit failed"):
            await _resume(workflow, table, sealer, "op-a", checkpoint_a, fail=True)
        # The failed run took the only idle graph and dropped it: the next resume builds one.
        request, answer = await _resume(workflow, table, sealer, "op-a", checkpoint_a)
        assert request.operation_id == answer.operation_id == "op-a"
        assert workflow.graphs_built == built + 1

    asyncio.run(scenario())

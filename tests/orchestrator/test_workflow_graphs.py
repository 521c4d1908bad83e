"""Built workflow graphs are reused, one run at a time, and each run answers its own operation."""

from __future__ import annotations

import asyncio
import logging
import pickle
from datetime import UTC, datetime

import pytest

from decisionflow.vocabulary import CaseId, OperationId
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
    run = RunCheckpoints(table, sealer, OperationId(operation_id), _now)
    checkpoint_id = await workflow.open(ReviewTask(OperationId(operation_id), CaseId(f"case-{operation_id}")), run)
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
    run = RunCheckpoints(table, sealer, OperationId(operation_id), _now)
    checkpoint = run.admit(table.get(checkpoint_id))
    seen: list[ReviewRequest] = []

    async def commit(answer: ReviewAnswer) -> ReviewAnswer:
        await asyncio.sleep(0)  # let other runs interleave
        if fail:
            raise RuntimeError("commit failed")
        return answer

    answer = ReviewAnswer(OperationId(operation_id), "APPROVE", f"reviewer-{operation_id}")
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
        checkpoint_a = await _open(workflow, table, sealer, "op-a")  # leaves one paused graph
        built = workflow.graphs_built
        with pytest.raises(RuntimeError, match="commit failed"):
            await _resume(workflow, table, sealer, "op-a", checkpoint_a, fail=True)
        # The failed run took the only idle graph and dropped it: the next resume builds one.
        request, answer = await _resume(workflow, table, sealer, "op-a", checkpoint_a)
        assert request.operation_id == answer.operation_id == "op-a"
        assert workflow.graphs_built == built + 1

    asyncio.run(scenario())


def _review_state(table: _Table, sealer: CheckpointSealer, checkpoint_id: str) -> tuple[object, ...]:
    """What a resume restores from a checkpoint: its pending requests, shared state, messages and
    position (not its own id, time or predecessor)."""
    checkpoint = sealer.open(table.rows[checkpoint_id])
    requests = {rid: (event.type, event.data) for rid, event in checkpoint.pending_request_info_events.items()}
    return (
        requests,
        pickle.dumps(checkpoint.state),
        pickle.dumps(checkpoint.messages),
        checkpoint.iteration_count,
        checkpoint.graph_signature_hash,
    )


def test_opens_after_resumes_run_on_drained_graphs_and_checkpoint_what_a_new_graph_would() -> None:
    async def scenario() -> None:
        workflow, table, sealer = ReviewWorkflow(), _Table(), CheckpointSealer([KEY])
        first = [f"op-{i}" for i in range(4)]
        checkpoints = {op: await _open(workflow, table, sealer, op) for op in first}
        await asyncio.gather(*(_resume(workflow, table, sealer, op, checkpoints[op]) for op in first))
        built = workflow.graphs_built

        # Reviews opened and answered after those: every open takes a graph a resume drained.
        later = [f"op-{i}" for i in range(4, 12)]
        for op in later:
            checkpoints[op] = await _open(workflow, table, sealer, op)
            request, answer = await _resume(workflow, table, sealer, op, checkpoints[op])
            assert request.operation_id == answer.operation_id == op
        concurrent = [f"op-c{i}" for i in range(4)]
        opened = await asyncio.gather(*(_open(workflow, table, sealer, op) for op in concurrent))
        checkpoints.update(zip(concurrent, opened, strict=True))
        assert workflow.graphs_built == built

        # The checkpoint of an open on a reused graph holds what one on a new graph holds.
        fresh_workflow, fresh_table = ReviewWorkflow(), _Table()
        for op in [*later, *concurrent]:
            checkpoint_id = checkpoints[op]
            fresh_id = await _open(fresh_workflow, fresh_table, sealer, op)
            assert _review_state(table, sealer, checkpoint_id) == _review_state(fresh_table, sealer, fresh_id)
            assert set(sealer.open(table.rows[checkpoint_id]).pending_request_info_events) == {f"review:{op}"}

    asyncio.run(scenario())


def test_resumes_on_paused_graphs_log_no_framework_warning(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        workflow, table, sealer = ReviewWorkflow(), _Table(), CheckpointSealer([KEY])
        for op in ("op-a", "op-b", "op-c"):
            checkpoint_id = await _open(workflow, table, sealer, op)
            await _resume(workflow, table, sealer, op, checkpoint_id)

    with caplog.at_level(logging.WARNING, logger="agent_framework"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records if r.name.startswith("agent_framework")] == []


def test_the_frameworks_other_pending_request_warning_is_still_heard(caplog: pytest.LogCaptureFixture) -> None:
    ReviewWorkflow()  # installs the filter of the restore case
    framework = logging.getLogger("agent_framework._workflows._workflow")
    template = (
        "Workflow %s received %s while %d request_info event(s) are still pending from an unfinished "
        "request/response cycle; %s. Deliver responses (responses=...) to complete the pending cycle "
        "before starting new input."
    )
    with caplog.at_level(logging.WARNING, logger="agent_framework"):
        framework.warning(template, "wf-1", "a checkpoint restore", 1, "overwritten")
        framework.warning(template, "wf-2", "a fresh message", 1, "those requests remain pending")
    assert [r.args[0] for r in caplog.records if isinstance(r.args, tuple)] == ["wf-2"]

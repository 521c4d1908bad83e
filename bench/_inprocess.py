"""The same job with no service around it: Microsoft Agent Framework in one process, as an application
would use it directly. Open a review (run until the human review request is pending, checkpointed
in the framework's in-memory storage), then resume from that checkpoint with the answer and write
one effect into a dict. No network, no database, no seal, one job at a time on one core."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from agent_framework import (
    Executor,
    InMemoryCheckpointStorage,
    WorkflowBuilder,
    WorkflowContext,
    WorkflowRunState,
    handler,
    response_handler,
)


@dataclass(frozen=True)
class _Task:
    operation_id: str


@dataclass(frozen=True)
class _Request:
    operation_id: str


@dataclass(frozen=True)
class _Answer:
    operation_id: str
    decision: str


class _Prepare(Executor):
    @handler
    async def run(self, task: _Task, ctx: WorkflowContext[_Request]) -> None:
        await ctx.send_message(_Request(task.operation_id))


class _Review(Executor):
    @handler
    async def run(self, request: _Request, ctx: WorkflowContext) -> None:
        await ctx.request_info(request, _Answer, request_id=f"review:{request.operation_id}")

    @response_handler
    async def on_answer(self, original: _Request, answer: _Answer, ctx: WorkflowContext[_Answer]) -> None:
        await ctx.send_message(answer)


class _Commit(Executor):
    def __init__(self, effects: dict[str, str]) -> None:
        super().__init__(id="commit")
        self._effects = effects

    @handler
    async def run(self, answer: _Answer, ctx: WorkflowContext) -> None:
        self._effects.setdefault(answer.operation_id, answer.decision)


def _workflow(effects: dict[str, str]) -> Any:
    prepare, review = _Prepare(id="prepare"), _Review(id="review")
    return (
        WorkflowBuilder(name="inprocess.review", start_executor=prepare)
        .add_edge(prepare, review)
        .add_edge(review, _Commit(effects))
        .build()
    )


async def _job(operation_id: str, storage: InMemoryCheckpointStorage, effects: dict[str, str]) -> None:
    opening = _workflow(effects)
    result = await opening.run(_Task(operation_id), checkpoint_storage=storage)
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    (request,) = result.get_request_info_events()
    checkpoint_id = opening.get_last_checkpoint_id()
    # The answer comes later, to a process that holds only the checkpoint: a fresh instance resumes.
    resuming = _workflow(effects)
    await resuming.run(
        responses={request.request_id: _Answer(operation_id, "APPROVE")},
        checkpoint_id=checkpoint_id,
        checkpoint_storage=storage,
    )
    assert effects[operation_id] == "APPROVE"


@dataclass(frozen=True, slots=True)
class InProcessResult:
    """Jobs (open, resume, one effect) per second on one core, and milliseconds of CPU per job."""

    jobs: int
    jobs_per_second: float
    cpu_ms_per_job: float


def measure(jobs: int) -> InProcessResult:
    """Run jobs jobs one after the other (after a few not counted) and time them."""

    async def run_all() -> tuple[float, float]:
        storage, effects = InMemoryCheckpointStorage(), dict[str, str]()
        for i in range(10):
            await _job(f"warm-{i}", storage, effects)
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(jobs):
            await _job(f"op-{i}", storage, effects)
        return time.perf_counter() - wall, time.process_time() - cpu

    wall, cpu = asyncio.run(run_all())
    return InProcessResult(jobs, jobs / wall, 1000 * cpu / jobs)

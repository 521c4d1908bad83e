"""The review workflow on Microsoft Agent Framework: ``prepare`` → ``review`` (a human review
request answered through ``@response_handler``) → ``commit``.

This is the only module that imports the framework. The service sees two calls: ``open``
(run until the review request is pending and checkpointed) and ``resume_and_answer``
(restore the pending review from its checkpoint and, in the same run, answer the request
the framework re-emits; the service sees that request before the answer is delivered,
and the ``commit`` executor calls the service's commit function, the only step with a
side effect). Restoring and answering in one run, as the framework allows, spares a
second run and the checkpoint it would take.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agent_framework import (
    Executor,
    WorkflowBuilder,
    WorkflowContext,
    WorkflowRunState,
    handler,
    response_handler,
)
from agent_framework.observability import disable_instrumentation

from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.errors import WorkflowProtocolError

WORKFLOW_NAME = "decisionflow.review"
WORKFLOW_VERSION = "1"
PREPARE, REVIEW, COMMIT = "prepare", "review", "commit"


@dataclass(frozen=True, slots=True)
class ReviewTask:
    """Input of the workflow: the operation to put before a reviewer."""

    operation_id: OperationId
    case_id: CaseId


@dataclass(frozen=True, slots=True)
class ReviewRequest:
    """The human review request; it carries the operation id the decision binds to."""

    operation_id: OperationId
    case_id: CaseId


@dataclass(frozen=True, slots=True)
class ReviewAnswer:
    """A reviewer's answer to a review request."""

    operation_id: OperationId
    decision: str
    reviewer: str


CommitFn = Callable[[ReviewAnswer], Awaitable[Any]]
RequestCheck = Callable[[ReviewRequest], None]


def _accept_any(request: ReviewRequest) -> None:
    return None


class _CommitSlot:
    """Carries the commit result (or its exception) out of the workflow without pickling it."""

    def __init__(self, commit: CommitFn, check_request: RequestCheck = _accept_any) -> None:
        self.arm(commit, check_request)

    def arm(self, commit: CommitFn, check_request: RequestCheck = _accept_any) -> None:
        """Make the slot serve one run: its commit function and request check, no result yet."""
        self.commit = commit
        self.check_request = check_request
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class _Prepare(Executor):
    @handler
    async def run(self, task: ReviewTask, ctx: WorkflowContext[ReviewRequest]) -> None:
        await ctx.send_message(ReviewRequest(task.operation_id, task.case_id))


class _Review(Executor):
    def __init__(self, slot: _CommitSlot) -> None:
        super().__init__(id=REVIEW)
        self._slot = slot

    @handler
    async def run(self, request: ReviewRequest, ctx: WorkflowContext) -> None:
        # A fixed request id per operation: a re-emitted request is recognisable as the same one.
        await ctx.request_info(request, ReviewAnswer, request_id=f"review:{request.operation_id}")

    @response_handler
    async def on_answer(
        self, original: ReviewRequest, answer: ReviewAnswer, ctx: WorkflowContext[ReviewAnswer]
    ) -> None:
        try:
            # original is the request the framework re-emitted from the restored checkpoint.
            self._slot.check_request(original)
        except BaseException as exc:  # handed back to the service, which re-raises it
            self._slot.error = exc
            return
        if answer.operation_id != original.operation_id:
            raise WorkflowProtocolError(
                f"answer for {answer.operation_id} delivered to the review of {original.operation_id}"
            )
        await ctx.send_message(answer)


class _Audit(Executor):
    """Only in the ``audited`` variant: changes the graph, as a later release might."""

    @handler
    async def run(self, request: ReviewRequest, ctx: WorkflowContext[ReviewRequest]) -> None:
        await ctx.send_message(request)


class _Commit(Executor):
    def __init__(self, slot: _CommitSlot) -> None:
        super().__init__(id=COMMIT)
        self._slot = slot

    @handler
    async def run(self, answer: ReviewAnswer, ctx: WorkflowContext) -> None:
        try:
            self._slot.result = await self._slot.commit(answer)
        except BaseException as exc:  # handed back to the service, which re-raises it
            self._slot.error = exc
        self._slot.done = True


async def _no_commit(answer: ReviewAnswer) -> None:
    raise WorkflowProtocolError(f"commit reached while opening the review of {answer.operation_id}")


@dataclass(frozen=True, slots=True)
class WorkflowIdentity:
    """What a pending review records about the workflow that checkpointed it."""

    name: str
    version: str
    graph_signature: str

    def label(self) -> str:
        """Return name@version/short-signature for messages."""
        return f"{self.name}@{self.version}/{self.graph_signature[:12]}"


def without_framework_spans() -> None:
    """Turn off the framework's own spans for this process: without a tracer provider they record
    nothing, yet every run would still create one per run, step and message."""
    disable_instrumentation()


# Idle graphs kept per process: enough for the calls one process has in flight.
IDLE_GRAPHS = 64

# The framework warns when a restore begins on an instance that still holds a pending request: the
# restore overwrites it. Resuming on a graph an ``open`` left paused does exactly that, on purpose
# (that review's request lives on in its stored checkpoint), so this one case is not an operator's
# concern. A fresh message on a paused instance, the warning's other case, is still heard.
_FRAMEWORK_RUN_LOGGER = "agent_framework._workflows._workflow"
_PENDING_WARNING = "Workflow %s received %s while %d request_info event(s) are still pending"
_A_RESTORE = "a checkpoint restore"


class _RestoreOverPausedGraph(logging.Filter):
    """Drops the framework's warning that a restore overwrites a paused graph's pending request."""

    def filter(self, record: logging.LogRecord) -> bool:
        restore_over_pending = (
            isinstance(record.msg, str)
            and record.msg.startswith(_PENDING_WARNING)
            and isinstance(record.args, tuple)
            and len(record.args) > 1
            and record.args[1] == _A_RESTORE
        )
        return not restore_over_pending


_RESTORE_OVER_PAUSED_GRAPH = _RestoreOverPausedGraph()


@dataclass(eq=False, slots=True)
class _Graph:
    """One built workflow instance and the slot its commit executor reports into."""

    workflow: Any
    slot: _CommitSlot


class ReviewWorkflow:
    """Builds the review workflow graph; ``variant`` exists so a graph change can be exercised.

    Building a graph costs about as much CPU as a third of the run that uses it, and the framework
    runs one instance at a time, so built graphs are reused, one run per graph at a time, in the
    two ways the framework resets an instance:

    - a restore resets everything (shared state, executor and edge states, messages and pending
      requests all come from the checkpoint), so a resume may run on any idle graph; it takes a
      *paused* one first (an ``open`` left it with its request pending), which nothing else reuses;
    - a fresh run resets only the run's own accounting and keeps the rest, as it must for a
      conversation of several turns, so an ``open`` runs only on a *drained* graph (its last run, a
      resume, ended with no message in flight and no request pending; its shared state holds nothing
      the fresh run does not set) or on a newly built one.

    An ``open`` and a resume together leave as many drained graphs as they took, so reviews opened
    and answered in turn build none. A graph whose run raised is dropped, never reused.
    """

    def __init__(self, variant: str = "standard") -> None:
        if variant not in ("standard", "audited"):
            raise ValueError(f"unknown workflow variant {variant!r}")
        self._variant = variant
        version = WORKFLOW_VERSION if variant == "standard" else WORKFLOW_VERSION + "+audited"
        probe = self._build(_CommitSlot(_no_commit))
        self.identity = WorkflowIdentity(WORKFLOW_NAME, version, str(probe.graph_signature_hash))
        self._paused: list[_Graph] = []
        self._drained: list[_Graph] = []
        self.graphs_built = 1  # the probe included (for tests and the curious)
        logging.getLogger(_FRAMEWORK_RUN_LOGGER).addFilter(_RESTORE_OVER_PAUSED_GRAPH)  # added once

    def _new_graph(self) -> _Graph:
        slot = _CommitSlot(_no_commit)
        self.graphs_built += 1
        return _Graph(self._build(slot), slot)

    def _keep(self, graph: _Graph, pool: list[_Graph]) -> None:
        graph.slot.arm(_no_commit)  # drop the finished run's functions and result
        if len(self._paused) + len(self._drained) < IDLE_GRAPHS:
            pool.append(graph)

    def _build(self, slot: _CommitSlot) -> Any:
        prepare, review, commit = _Prepare(id=PREPARE), _Review(slot), _Commit(slot)
        builder = WorkflowBuilder(name=WORKFLOW_NAME, start_executor=prepare)
        if self._variant == "audited":
            audit = _Audit(id="audit")
            builder.add_edge(prepare, audit).add_edge(audit, review)
        else:
            builder.add_edge(prepare, review)
        return builder.add_edge(review, commit).build()

    async def open(self, task: ReviewTask, storage: Any) -> str:
        """Run until the review request is pending; return the id of the checkpoint to resume from."""
        graph = self._drained.pop() if self._drained else self._new_graph()
        workflow = graph.workflow
        result = await workflow.run(task, checkpoint_storage=storage)
        requests = result.get_request_info_events()
        if result.get_final_state() != WorkflowRunState.IDLE_WITH_PENDING_REQUESTS or len(requests) != 1:
            raise WorkflowProtocolError(f"review workflow did not pause for review of {task.operation_id}")
        if requests[0].data != ReviewRequest(task.operation_id, task.case_id):
            raise WorkflowProtocolError(f"review request does not carry operation {task.operation_id}")
        checkpoint_id = workflow.get_last_checkpoint_id()
        if checkpoint_id is None:
            raise WorkflowProtocolError("no checkpoint was written for the pending review")
        self._keep(graph, self._paused)
        return str(checkpoint_id)

    async def resume_and_answer(
        self,
        checkpoint_id: str,
        checkpoint: Any,
        answer: ReviewAnswer,
        storage: Any,
        check_request: RequestCheck,
        commit: CommitFn,
    ) -> Any:
        """Restore the pending review from checkpoint_id (already verified and decoded as checkpoint) and
        answer the request it re-emits in the same run: check_request sees that request first, then the
        commit step runs; its result is returned (its exception, or check_request's, raised)."""
        pending = list(checkpoint.pending_request_info_events.values())
        if len(pending) != 1 or not isinstance(pending[0].data, ReviewRequest):
            raise WorkflowProtocolError(f"checkpoint {checkpoint_id} does not hold one pending review request")
        graph = self._paused.pop() if self._paused else self._drained.pop() if self._drained else self._new_graph()
        slot = graph.slot
        slot.arm(commit, check_request)
        run = await graph.workflow.run(
            responses={pending[0].request_id: answer}, checkpoint_id=checkpoint_id, checkpoint_storage=storage
        )
        if slot.error is not None:
            raise slot.error
        if not slot.done:
            raise WorkflowProtocolError(f"the commit step did not run for {answer.operation_id}")
        result = slot.result
        drained = run.get_final_state() == WorkflowRunState.IDLE and not run.get_request_info_events()
        self._keep(graph, self._drained if drained else self._paused)
        return result

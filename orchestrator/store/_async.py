"""The store for the async service: every call runs the sync store in a worker thread, in one place.

Each coroutine method is declared by naming the sync method it runs (``get_proposal =
in_thread(OrchestratorStore.get_proposal)``): its parameters and result type come from that method,
so the facade cannot drift from the store, and mypy checks every call against the store's own
signature. A call is one ``asyncio.to_thread`` hop, as a hand-written ``await
asyncio.to_thread(self.sync.get_proposal, ...)`` would be; the method is looked up on the store at
the call, so an instance or subclass that replaces it is the one called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, cast, overload

from orchestrator.store._checkpoints import CheckpointTable
from orchestrator.store._store import OrchestratorStore

P = ParamSpec("P")
T = TypeVar("T")


class InThread(Generic[P, T]):
    """A sync store method as a coroutine method of AsyncOrchestratorStore, run in a worker thread."""

    def __init__(self, method: Callable[Concatenate[OrchestratorStore, P], T]) -> None:
        self._name = method.__name__
        self.__doc__ = f"See OrchestratorStore.{self._name}; runs in a worker thread."

    def __set_name__(self, owner: type[Any], name: str) -> None:
        # The attribute's name is the method looked up at the call: a mismatch would call another method.
        if name != self._name:
            raise TypeError(f"{owner.__name__}.{name} runs OrchestratorStore.{self._name}: name them alike")

    @overload
    def __get__(self, facade: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, facade: AsyncOrchestratorStore, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(
        self, facade: AsyncOrchestratorStore | None, owner: type[Any]
    ) -> Self | Callable[P, Coroutine[Any, Any, T]]:
        if facade is None:
            return self
        name = self._name

        async def run(*args: P.args, **kwargs: P.kwargs) -> T:
            method = cast("Callable[P, T]", getattr(facade.sync, name))
            return await asyncio.to_thread(method, *args, **kwargs)

        run.__name__ = run.__qualname__ = name
        run.__doc__ = self.__doc__
        return run


def in_thread(method: Callable[Concatenate[OrchestratorStore, P], T]) -> InThread[P, T]:
    """Declare the coroutine method that runs method (a method of OrchestratorStore) in a worker thread."""
    return InThread(method)


class AsyncOrchestratorStore:
    """OrchestratorStore's methods as coroutines; the database work never blocks the event loop."""

    def __init__(self, store: OrchestratorStore) -> None:
        self.sync = store

    @property
    def checkpoints(self) -> CheckpointTable:
        """The checkpoint table the workflow runs load earlier checkpoints from."""
        return self.sync.checkpoints

    create_proposal = in_thread(OrchestratorStore.create_proposal)
    start_inputs = in_thread(OrchestratorStore.start_inputs)
    check_open_reviews = in_thread(OrchestratorStore.check_open_reviews)
    create_edit = in_thread(OrchestratorStore.create_edit)
    current_operation_id = in_thread(OrchestratorStore.current_operation_id)
    get_proposal = in_thread(OrchestratorStore.get_proposal)
    find_proposal = in_thread(OrchestratorStore.find_proposal)
    get_pending_review = in_thread(OrchestratorStore.get_pending_review)
    list_pending_reviews = in_thread(OrchestratorStore.list_pending_reviews)
    pending_reviews_listing = in_thread(OrchestratorStore.pending_reviews_listing)
    proposal_view = in_thread(OrchestratorStore.proposal_view)
    decision_inputs = in_thread(OrchestratorStore.decision_inputs)
    record_decision = in_thread(OrchestratorStore.record_decision)
    votes = in_thread(OrchestratorStore.votes)
    escalations = in_thread(OrchestratorStore.escalations)
    operation_progress = in_thread(OrchestratorStore.operation_progress)
    cast_vote = in_thread(OrchestratorStore.cast_vote)
    record_attempt = in_thread(OrchestratorStore.record_attempt)
    release_attempt = in_thread(OrchestratorStore.release_attempt)
    record_receipt = in_thread(OrchestratorStore.record_receipt)
    record_rejection = in_thread(OrchestratorStore.record_rejection)
    get_operation = in_thread(OrchestratorStore.get_operation)
    list_operations = in_thread(OrchestratorStore.list_operations)
    operations_listing = in_thread(OrchestratorStore.operations_listing)
    settle = in_thread(OrchestratorStore.settle)

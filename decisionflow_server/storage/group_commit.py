"""Group commit: concurrent write transactions of one process share one SQLite commit (one fsync).

SQLite runs one write transaction at a time, and with ``synchronous=FULL`` each commit waits for
an fsync: under load the fsyncs, not the statements, bound how many writes a process makes per
second. Here a writer queues its work (a function of a connection) and takes the process's write
turn; whoever holds the turn runs every queued work, up to ``MAX_BATCH``, in one transaction
and commits once. The works run one after the other with no savepoint between them; only when
one raises is the transaction rolled back and the batch run again with each work in a savepoint
of its own (a lone work needs none: its transaction is its own). No writer waits on purpose: a
batch is what queued while the previous commit was in flight, so one writer alone commits at
once, as before.

Durability is unchanged: a writer gets its answer only after the commit that holds its work has
returned. Isolation is kept per work: one that raises is rolled back to its savepoint and gets
its own exception; the others commit. A commit that fails fails every work of the batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

T = TypeVar("T")

MAX_BATCH = 64


@dataclass(eq=False)
class _Queued(Generic[T]):
    work: Callable[[sa.Connection], T]
    result: T | None = None
    error: BaseException | None = None
    finished: bool = False


class GroupCommit:
    """Runs write work for one engine, sharing commits among the writers queued at the same time."""

    def __init__(self, engine: Engine, turn: AbstractContextManager[object], *, max_batch: int = MAX_BATCH) -> None:
        self._engine = engine
        # The process's write turn, shared with writes that do not go through here.
        self._turn = turn
        self._max_batch = max_batch
        self._queue_lock = threading.Lock()
        self._queue: list[_Queued[Any]] = []
        self.commits = 0  # transactions committed (for tests and the curious)
        self.works = 0  # works committed in them

    def run(self, work: Callable[[sa.Connection], T]) -> T:
        """Run work(conn) in a committed transaction, possibly shared; return its result or raise its error."""
        queued: _Queued[T] = _Queued(work)
        with self._queue_lock:
            self._queue.append(queued)
        while not queued.finished:
            with self._turn:
                if queued.finished:
                    break  # committed by the writer that held the turn before us
                with self._queue_lock:
                    batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
                self._commit(batch)
        if queued.error is not None:
            raise queued.error
        return queued.result  # type: ignore[return-value]

    def _commit(self, batch: list[_Queued[Any]]) -> None:
        if len(batch) == 1 or not self._commit_together(batch):
            self._commit_isolated(batch)

    def _commit_together(self, batch: list[_Queued[Any]]) -> bool:
        """Run the batch's works in one transaction without savepoints and commit it; False (nothing
        committed, nothing answered) when one of them raised, so the batch must run isolated."""
        try:
            with self._engine.begin() as conn:
                results = [queued.work(conn) for queued in batch]
        except Exception:
            return False
        except BaseException as exc:  # not a work's answer: the batch fails with it, as when isolated
            for queued in batch:
                queued.result, queued.error, queued.finished = None, exc, True
            return True
        for queued, result in zip(batch, results, strict=True):
            queued.result = result
            queued.finished = True
        self.commits += 1
        self.works += len(batch)
        return True

    def _commit_isolated(self, batch: list[_Queued[Any]]) -> None:
        lone = len(batch) == 1
        try:
            with self._engine.begin() as conn:
                for queued in batch:
                    if lone:
                        queued.result = queued.work(conn)  # raises out: its transaction rolls back
                        continue
                    savepoint = conn.begin_nested()
                    try:
                        queued.result = queued.work(conn)
                    except Exception as exc:  # this work's own answer; the others go on
                        try:
                            savepoint.rollback()
                        except Exception:
                            # SQLite ended the transaction itself (a full disk, an I/O error): the
                            # batch fails, with the error that ended it.
                            raise exc from exc.__cause__
                        queued.error = exc
                    else:
                        savepoint.commit()
            self.commits += 1
            self.works += sum(q.error is None for q in batch)
        except BaseException as exc:
            # Nothing of the batch is durable: every work fails with the commit's error.
            for queued in batch:
                queued.result, queued.error = None, exc
        finally:
            for queued in batch:
                queued.finished = True

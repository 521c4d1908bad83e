"""Group commit on a real SQLite file: writers queued together share one commit, each keeps its own
answer, a failing one is rolled back alone, and every answer comes after the commit holding it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from decisionflow_server.storage import db
from decisionflow_server.storage.group_commit import GroupCommit

WRITERS = 12
FAILING = 5


class Refused(Exception):
    """The answer of one work that refuses after it has written."""


def _table(engine: sa.Engine) -> sa.Table:
    metadata = sa.MetaData()
    table = sa.Table("items", metadata, sa.Column("n", sa.Integer, primary_key=True))
    metadata.create_all(engine)
    return table


def test_queued_writers_share_one_commit_and_a_refusal_writes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'group.db'}"
    engine = db.create_engine(url)
    table = _table(engine)
    turn = threading.Lock()
    group = GroupCommit(engine, turn)
    answers: dict[int, object] = {}

    def write(n: int) -> None:
        def work(conn: sa.Connection) -> int:
            conn.execute(table.insert(), {"n": n})
            if n == FAILING:
                raise Refused(n)  # after its insert: the savepoint must take the row back
            return n * 10

        try:
            answers[n] = group.run(work)
        except Refused as refused:
            answers[n] = refused

    # Hold the write turn, as a commit in flight does, while every writer queues behind it.
    with turn:
        threads = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(group._queue) < WRITERS:
            assert time.monotonic() < deadline, "writers did not queue"
            time.sleep(0.005)
    for thread in threads:
        thread.join(10)

    assert (group.commits, group.works) == (1, WRITERS - 1)
    assert isinstance(answers.pop(FAILING), Refused)
    assert answers == {n: n * 10 for n in range(WRITERS) if n != FAILING}
    # Durable: another engine on the file sees exactly the committed rows.
    other = db.create_engine(url)
    try:
        with other.connect() as conn:
            stored = set(conn.execute(sa.select(table.c.n)).scalars())
    finally:
        other.dispose()
        engine.dispose()
    assert stored == set(range(WRITERS)) - {FAILING}


def test_a_writer_alone_commits_at_once(tmp_path: Path) -> None:
    engine = db.create_engine(f"sqlite:///{tmp_path / 'alone.db'}")
    table = _table(engine)
    group = GroupCommit(engine, threading.Lock())
    try:

        def insert(n: int) -> int:
            return group.run(lambda conn: int(conn.execute(table.insert(), {"n": n}).rowcount))

        assert [insert(n) for n in range(3)] == [1, 1, 1]
        assert (group.commits, group.works) == (3, 3)
        with pytest.raises(sa.exc.IntegrityError):
            insert(0)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one() == 3
    finally:
        engine.dispose()


def _queue_behind_turn(group: GroupCommit, turn: threading.Lock, writers: list[threading.Thread]) -> None:
    with turn:
        for thread in writers:
            thread.start()
        deadline = time.monotonic() + 10
        while len(group._queue) < len(writers):
            assert time.monotonic() < deadline, "writers did not queue"
            time.sleep(0.005)
    for thread in writers:
        thread.join(10)


def test_a_batch_without_refusals_runs_each_work_once_and_takes_no_savepoint(tmp_path: Path) -> None:
    engine = db.create_engine(f"sqlite:///{tmp_path / 'together.db'}")
    table = _table(engine)
    statements: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda conn, cursor, sql, *rest: statements.append(sql))
    turn = threading.Lock()
    group = GroupCommit(engine, turn)
    runs: list[int] = []
    answers: dict[int, int] = {}

    def write(n: int) -> None:
        def work(conn: sa.Connection) -> int:
            runs.append(n)
            conn.execute(table.insert(), {"n": n})
            return n

        answers[n] = group.run(work)

    try:
        _queue_behind_turn(group, turn, [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)])
        assert (group.commits, group.works) == (1, WRITERS)
        assert sorted(runs) == list(range(WRITERS)) and answers == {n: n for n in range(WRITERS)}
        assert not [sql for sql in statements if "SAVEPOINT" in sql.upper()]
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one() == WRITERS
    finally:
        engine.dispose()


def test_a_lone_work_that_refuses_after_writing_writes_nothing(tmp_path: Path) -> None:
    engine = db.create_engine(f"sqlite:///{tmp_path / 'lone.db'}")
    table = _table(engine)
    group = GroupCommit(engine, threading.Lock())

    def work(conn: sa.Connection) -> None:
        conn.execute(table.insert(), {"n": 1})
        raise Refused(1)

    try:
        with pytest.raises(Refused):
            group.run(work)
        assert group.run(lambda conn: int(conn.execute(table.insert(), {"n": 2}).rowcount)) == 1
        with engine.connect() as conn:
            assert list(conn.execute(sa.select(table.c.n)).scalars()) == [2]
    finally:
        engine.dispose()

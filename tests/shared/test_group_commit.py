"""Group commit on a real SQLite file: writers queued together share one commit, each keeps its own
answer, a failing one is rolled back alone, and every answer comes after the commit holding it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from decisionflow import db
from decisionflow.group_commit import GroupCommit

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

"""The relay's loop against fakes at its two seams (the feed, JetStream), with acknowledgements given by
the test in any order: a case's next event is first sent only once its previous one is acknowledged, the
cursor file never passes an event JetStream has not acknowledged, and a failed publish is retried, never
skipped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

from decisionflow.client.events import EventView, Heartbeat
from decisionflow.vocabulary import Decision, OperationState
from decisionflow_relay.cursor import CursorFile
from decisionflow_relay.domain import Outgoing
from decisionflow_relay.errors import PublishFailed
from decisionflow_relay.metrics import RelayMetrics
from decisionflow_relay.service import Relay, RelaySettings

CASES = ("A", "B", "A", "B", "C")  # the case of each event, by index


def event(index: int) -> EventView:
    return EventView(
        index=index,
        leaf=b"leaf %d" % index,
        kind="proposal",
        case_id=CASES[index],
        operation_id="op-v1-" + f"{index:064x}",
        action="record_support_review",
        state=OperationState.PENDING_REVIEW,
        principal="arthur",
        occurred_at=datetime(2026, 12, 7, tzinfo=UTC),
        decision=Decision.UNSPECIFIED,
    )


def feed(start_index: int) -> AsyncIterator[EventView | Heartbeat]:
    async def events() -> AsyncIterator[EventView | Heartbeat]:
        yield Heartbeat(start_index, None)
        for index in range(start_index, len(CASES)):
            yield event(index)
        await asyncio.Event().wait()  # the log's end: the stream stays open

    return events()


class GatedJetStream:
    """Acknowledges a message only when the test opens its gate; fails the first attempt of those in fail_once."""

    def __init__(self, fail_once: set[int]) -> None:
        self.attempts: list[int] = []
        self.fail_once = fail_once
        self.gates: dict[int, asyncio.Future[bool]] = {}

    def gate(self, index: int) -> asyncio.Future[bool]:
        return self.gates.setdefault(index, asyncio.get_running_loop().create_future())

    async def publish(self, message: Outgoing) -> bool:
        self.attempts.append(message.index)
        if message.index in self.fail_once:
            self.fail_once.discard(message.index)
            raise PublishFailed(message.subject, "NoRespondersError")
        return await self.gate(message.index)

    def acknowledge(self, index: int, duplicate: bool = False) -> None:
        self.gate(index).set_result(duplicate)


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def test_case_order_and_a_cursor_that_never_passes_an_unacknowledged_event(tmp_path: Path) -> None:
    cursor = CursorFile(tmp_path / "relay.cursor")
    metrics = RelayMetrics()

    async def scenario() -> None:
        jetstream = GatedJetStream(fail_once={2})
        relay = Relay(feed, jetstream, cursor, RelaySettings("p", "o", cursor_write_seconds=0), metrics)
        stop = asyncio.Event()
        running = asyncio.create_task(relay.run(stop))

        def stored() -> int:
            return cursor.read()

        # 0, 1 and 4 go at once; 2 waits for 0 (case A), 3 for 1 (case B).
        await until(lambda: sorted(jetstream.attempts) == [0, 1, 4])
        jetstream.acknowledge(4)
        jetstream.acknowledge(1)
        await until(lambda: jetstream.attempts == [0, 1, 4, 3])
        jetstream.acknowledge(3, duplicate=True)
        await until(lambda: relay.progress.in_flight == 2)  # 0, and 2 waiting for it
        assert (stored(), relay.progress.cursor, relay.progress.lag_events) == (0, 0, 5)
        # 0 acknowledged: the cursor moves to 2; 2's first attempt fails and is tried again, never skipped.
        jetstream.acknowledge(0)
        await until(lambda: jetstream.attempts.count(2) == 2)
        await until(lambda: stored() == 2)
        jetstream.acknowledge(2)
        await until(lambda: stored() == 5)
        stop.set()
        await running

    asyncio.run(scenario())
    assert cursor.read() == 5
    samples = {
        name: metrics.registry.get_sample_value(f"decisionflow_relay_{name}_total")
        for name in ("published", "duplicates", "publish_errors")
    }
    assert samples == {"published": 5, "duplicates": 1, "publish_errors": 1}


def test_a_restart_watches_from_the_stored_cursor(tmp_path: Path) -> None:
    cursor = CursorFile(tmp_path / "relay.cursor")
    cursor.write(3)

    async def scenario() -> list[int]:
        jetstream = GatedJetStream(fail_once=set())
        relay = Relay(feed, jetstream, cursor, RelaySettings("p", "o", cursor_write_seconds=0), RelayMetrics())
        stop = asyncio.Event()
        running = asyncio.create_task(relay.run(stop))
        await until(lambda: sorted(jetstream.attempts) == [3, 4])
        jetstream.acknowledge(3)
        jetstream.acknowledge(4)
        await until(lambda: cursor.read() == 5)
        stop.set()
        await running
        return jetstream.attempts

    assert asyncio.run(scenario()) == [3, 4]

"""A watcher of the event feed in a process of its own, for bench/events_cost.py: it streams every event
from now on (``EventsClient.watch``) and writes a line per event as it arrives, stamped on the machine's
monotonic clock (CLOCK_MONOTONIC, which every process reads alike), so the bench can set each arrival
against the moment its own process saw the call that made the event answered.

    python -m bench._event_watcher TARGET FILE

Prints ``ready NEXT_INDEX`` on stdout once the stream's first heartbeat came (the stream is open and
starts at NEXT_INDEX), then appends ``MONOTONIC_NS INDEX KIND OPERATION_ID`` to FILE for every event,
flushed at once. It runs until it is killed (SIGTERM).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from decisionflow.channels import insecure_channel
from decisionflow.client import EventsClient, EventView, Heartbeat


def main(argv: Sequence[str] | None = None) -> int:
    """Watch TARGET's feed from now on and write each event's arrival to FILE."""
    target, path = argv if argv is not None else sys.argv[1:]
    channel = insecure_channel(target)
    announced = False
    with open(path, "a", encoding="ascii") as out:
        for item in EventsClient(channel).watch(from_now=True, heartbeats=True):
            if isinstance(item, EventView):
                out.write(f"{time.monotonic_ns()} {item.index} {item.kind} {item.operation_id}\n")
                out.flush()
            elif isinstance(item, Heartbeat) and not announced:
                print(f"ready {item.next_index}", flush=True)
                announced = True
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Step 8's JetStream consumer: a process of its own that reads the relay's stream with explicit acks and
prints, as one JSON line, the effect event of one operation the moment it arrives, then exits 0.

    python -m decisionflow_demo.jetstream_consumer --servers nats://127.0.0.1:4222 --operation-id op-v1-…

It reads from the stream's start (every earlier event is acknowledged and passed over), deduplicating by
``Nats-Msg-Id`` as docs/events.md asks of a consumer. Exit 1 when nothing arrives within --seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import nats
import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

STREAM = "DECISIONFLOW_EVENTS"
EFFECTS = "decisionflow.*.effect.>"


async def consume(servers: str, operation_id: str, seconds: float) -> dict[str, object] | None:
    """The CloudEvent of operation_id's effect, with its Nats-Msg-Id; None when none came in time."""
    until = time.monotonic() + seconds
    nc = await nats.connect(servers=servers.split(","), connect_timeout=5)
    seen: set[str] = set()
    try:
        js = nc.jetstream()
        config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, ack_wait=30)
        while True:
            try:
                sub = await js.pull_subscribe(EFFECTS, stream=STREAM, config=config)
                break
            except nats.js.errors.NotFoundError:
                # The relay creates the stream when it starts; a consumer started first waits for it.
                if time.monotonic() >= until:
                    return None
                await asyncio.sleep(0.2)
        while time.monotonic() < until:
            try:
                messages = await sub.fetch(100, timeout=1)
            except TimeoutError:  # nats-py's, or asyncio's when fetch's own deadline ran out first
                continue
            for message in messages:
                msg_id = (message.headers or {}).get("Nats-Msg-Id", "")
                event = json.loads(message.data)
                await message.ack()
                if msg_id in seen:
                    continue
                seen.add(msg_id)
                if event.get("subject") == operation_id:
                    return {"nats_msg_id": msg_id, "subject": message.subject, "cloudevent": event}
        return None
    finally:
        await nc.close()


def main() -> int:
    """Wait for the effect event of --operation-id and print it."""
    parser = argparse.ArgumentParser(prog="python -m decisionflow_demo.jetstream_consumer")
    parser.add_argument("--servers", required=True)
    parser.add_argument("--operation-id", required=True)
    parser.add_argument("--seconds", type=float, default=120)
    args = parser.parse_args()
    received = asyncio.run(consume(args.servers, args.operation_id, args.seconds))
    if received is None:
        print(f"no effect event of {args.operation_id} within {args.seconds:g} s", file=sys.stderr)
        return 1
    print(json.dumps(received), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

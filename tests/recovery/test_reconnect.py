"""The orchestrator's receiver channel after an outage: it reconnects within about a second and an
Apply waits for the connection within its deadline; a receiver that stays away still leaves the
call indeterminate, never a definite answer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from decisionflow import channels
from decisionflow.client import AsyncReceiverClient, DeadlineExceeded
from decisionflow.retry import NO_RETRY
from decisionflow_server.foundation.processes import free_port
from effect_receiver.config import ReceiverConfig
from effect_receiver.main import create_server
from orchestrator.effects import ReceiverEffects
from orchestrator.ports import EffectIndeterminate
from tests.support.payloads import effect_request, new_operation_id


def test_every_channel_reconnects_within_a_second_unless_the_caller_says_otherwise() -> None:
    options = dict(channels.channel_options())
    assert options["grpc.max_reconnect_backoff_ms"] == 1_000
    assert options["grpc.initial_reconnect_backoff_ms"] <= options["grpc.max_reconnect_backoff_ms"]
    quicker = channels.channel_options([("grpc.max_reconnect_backoff_ms", 100)])
    assert [value for key, value in quicker if key == "grpc.max_reconnect_backoff_ms"] == [100]
    assert ("grpc.enable_retries", 0) in quicker


async def _apply(client: AsyncReceiverClient, operation_id: str, deadline_in: float) -> str:
    applied = await client.apply(effect_request(operation_id), deadline=time.monotonic() + deadline_in)
    return applied.receipt.receipt_id


def test_an_apply_made_while_the_receiver_is_away_reaches_it_when_it_comes_back(tmp_path: Path) -> None:
    port = free_port()
    config = ReceiverConfig(address=f"127.0.0.1:{port}", database_url=f"sqlite:///{tmp_path / 'receiver.db'}")

    async def scenario() -> str:
        channel = channels.aio_insecure_channel(f"127.0.0.1:{port}")
        # One attempt: what reaches the receiver is the waiting call, not a retry.
        client = AsyncReceiverClient(channel, timeout=10.0, policy=NO_RETRY)
        try:
            call = asyncio.ensure_future(_apply(client, new_operation_id(), deadline_in=10.0))
            await asyncio.sleep(1.0)  # the channel has failed to connect by now
            assert not call.done()
            server = await create_server(config)
            try:
                return await call
            finally:
                await server.stop(1.0)
        finally:
            await channel.close(None)

    assert asyncio.run(scenario()).startswith("rcpt-")


def test_an_apply_to_a_receiver_that_stays_away_is_indeterminate() -> None:
    target = f"127.0.0.1:{free_port()}"

    async def scenario() -> None:
        channel = channels.aio_insecure_channel(target)
        try:
            with pytest.raises(DeadlineExceeded) as raised:
                await _apply(AsyncReceiverClient(channel, timeout=5.0), new_operation_id(), deadline_in=1.0)
            assert raised.value.definite is False
        finally:
            await channel.close(None)
        effects = ReceiverEffects.connect(target, token=None, timeout=1.0)
        try:
            with pytest.raises(EffectIndeterminate):
                await effects.apply(effect_request(new_operation_id()), deadline=None)
        finally:
            await effects.close()

    asyncio.run(scenario())

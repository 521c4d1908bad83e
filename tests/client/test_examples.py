"""examples/approve_async.py against real services: a retry through a lost reply, a stale tab."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from decisionflow.channels import aio_insecure_channel
from decisionflow.client import ApproveResult, AsyncReviewClient, Outcome
from decisionflow.v1 import common_pb2
from tests.support.client_examples import ExampleServices, check_story

from .client_standin import StandIn, standin
from .test_client_review import OP, approved

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "approve_async.py"


@pytest.mark.slow
def test_the_async_example_approves_once_through_a_lost_reply_and_meets_a_stale_tab(
    example_services: ExampleServices,
) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), example_services.target],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    check_story(done.stdout, example_services)


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("approve_async_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _approve_once(server: StandIn, outcomes: list[common_pb2.Outcome.ValueType]) -> tuple[ApproveResult, int]:
    """Run the example's approve_once on a real channel to a stand-in answering outcomes in turn."""
    server.script.then("Approve", *(approved(outcome, replay=n > 0) for n, outcome in enumerate(outcomes)))
    approve_once = _example().approve_once

    async def run() -> tuple[ApproveResult, int]:
        async with aio_insecure_channel(server.target) as channel:
            answer: tuple[ApproveResult, int] = await approve_once(AsyncReviewClient(channel), OP)
            return answer

    return asyncio.run(run())


def test_the_example_repeats_an_unknown_outcome_with_the_same_operation_id(capsys: pytest.CaptureFixture[str]) -> None:
    with standin() as server:
        result, attempts = _approve_once(server, [common_pb2.OUTCOME_UNKNOWN, common_pb2.OUTCOME_COMMITTED])
        sent = [call.request.operation_id for call in server.script.calls("Approve")]
    assert (result.outcome, result.replay, attempts) == (Outcome.COMMITTED, True, 2)
    assert sent == [OP, OP]
    assert "  attempt 1 indeterminate: outcome UNKNOWN" in capsys.readouterr().out


def test_the_example_returns_the_last_unknown_when_its_attempts_run_out() -> None:
    with standin() as server:
        result, attempts = _approve_once(server, [common_pb2.OUTCOME_UNKNOWN] * 4)
    assert (result.outcome, attempts) == (Outcome.UNKNOWN, 4)  # an answer for the reconciler, never raised

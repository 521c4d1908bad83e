"""The fault interceptor: its plan, its seeded draws, and a real receiver wired with it by configuration."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import common_pb2, effect_receiver_pb2
from decisionflow_server.runtime.faults import Fault, FaultPlan
from effect_receiver.config import ReceiverConfig, load
from tests.support.receiver import InProcessReceiver, apply_request, count_rows, new_operation_id


def test_plan_parses_probabilities_and_seed() -> None:
    assert FaultPlan.parse("lose_reply=0.2,delay=0.05,seed=7") == FaultPlan(0.2, 0.05, 7)
    assert FaultPlan.parse(" delay=1 ") == FaultPlan(0.0, 1.0, 0)
    assert not FaultPlan.parse("").enabled
    assert FaultPlan.parse("lose_reply=0.01").enabled


@pytest.mark.parametrize(
    "spec",
    ["lose_reply", "drop=0.1", "lose_reply=1.5", "delay=-0.1", "lose_reply=0.6,delay=0.6", "seed=x", "delay=nan"],
)
def test_plan_refuses_what_it_cannot_mean(spec: str) -> None:
    with pytest.raises(ValueError, match="faults"):
        FaultPlan.parse(spec)


def test_draws_are_seeded_per_call_and_keep_the_rates() -> None:
    plan = FaultPlan(0.1, 0.1, seed=7)
    draws = [plan.draw("/m", f"op{i}", 1) for i in range(20_000)]
    assert draws == [plan.draw("/m", f"op{i}", 1) for i in range(20_000)]  # same seed, same faults
    assert draws != [replace(plan, seed=8).draw("/m", f"op{i}", 1) for i in range(20_000)]
    counted = Counter(draws)
    assert 0.09 < counted[Fault.LOSE_REPLY] / 20_000 < 0.11
    assert 0.09 < counted[Fault.DELAY] / 20_000 < 0.11


def test_receiver_configuration_enables_faults_only_when_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert not load([], {}).faults.enabled
    assert load([], {"DECISIONFLOW_RECEIVER_FAULTS": "lose_reply=0.2,delay=0.05,seed=7"}).faults == FaultPlan(
        0.2, 0.05, 7
    )
    assert load(["--faults", "delay=1"], {"DECISIONFLOW_RECEIVER_FAULTS": "lose_reply=1"}).faults == FaultPlan(0, 1)
    with pytest.raises(SystemExit) as refused:
        load(["--faults", "lose_reply=2"], {})
    assert refused.value.code == 2
    assert "faults" in capsys.readouterr().err


@pytest.fixture
def receivers(tmp_path: Path) -> Iterator[tuple[ReceiverConfig, list[InProcessReceiver]]]:
    """A base config on one database, and the receivers a test started on it (stopped afterwards)."""
    started: list[InProcessReceiver] = []
    yield ReceiverConfig(address="127.0.0.1:0", database_url=f"sqlite:///{tmp_path / 'receiver.db'}"), started
    for receiver in started:
        receiver.stop(0)


def _start(receivers: tuple[ReceiverConfig, list[InProcessReceiver]], faults: str) -> InProcessReceiver:
    base, started = receivers
    receiver = InProcessReceiver(replace(base, faults=FaultPlan.parse(faults)))
    started.append(receiver)
    return receiver


def test_lost_reply_commits_then_answers_unavailable(
    receivers: tuple[ReceiverConfig, list[InProcessReceiver]],
) -> None:
    faulty, plain = _start(receivers, "lose_reply=1"), _start(receivers, "")
    assert faulty.running.faults is not None and plain.running.faults is None
    op = new_operation_id()
    with pytest.raises(grpc.RpcError) as lost:
        faulty.stub.Apply(apply_request(op), timeout=5)
    assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "fault injection" in (lost.value.details() or "")
    # The handler ran to its commit before the reply was lost.
    looked_up = plain.stub.Lookup(effect_receiver_pb2.LookupRequest(operation_id=op), timeout=5).result
    assert looked_up.status == common_pb2.LOOKUP_STATUS_APPLIED
    assert faulty.running.faults.injected == Counter({Fault.LOSE_REPLY: 1})


def test_delay_holds_the_reply_past_the_deadline(receivers: tuple[ReceiverConfig, list[InProcessReceiver]]) -> None:
    faulty = _start(receivers, "delay=1")
    op = new_operation_id()
    with pytest.raises(grpc.RpcError) as late:
        faulty.stub.Apply(apply_request(op), timeout=0.3)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert count_rows(receivers[0].database_url) == (1, 1)


def test_refusals_are_never_faulted(receivers: tuple[ReceiverConfig, list[InProcessReceiver]]) -> None:
    faulty = _start(receivers, "lose_reply=1")
    with pytest.raises(grpc.RpcError) as refused:
        faulty.stub.Apply(apply_request(new_operation_id(), digest="0" * 64), timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert faulty.running.faults is not None and not faulty.running.faults.injected
    assert count_rows(receivers[0].database_url) == (0, 0)

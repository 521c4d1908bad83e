"""One address, one service: real processes. While a service runs with ``--workers 2``, a second
instance on the same address (another database, ``--workers 1`` or ``--workers 2``) is refused
with the one-line "cannot listen on … (--address …)" error, exit status 1, and leaves no database
file; every call still reaches the first instance's database."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc, review_pb2_grpc
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    orchestrator_args,
    receiver_args,
)
from decisionflow_server.foundation.processes import ServiceProcess, child_environment, free_port, spawn
from decisionflow_server.runtime import workers
from tests.support.payloads import apply_request, new_operation_id
from tests.support.stack import CHECKPOINT_KEY, count, start_request

CALLS = 30  # each on a new connection, so a second listener would get its share of them
ENV = {CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY}


def _args(service: str, database_url: str, address: str, workers: int) -> list[str]:
    extra = ["--workers", str(workers)]
    if service == "receiver":
        return receiver_args(database_url, address=address, extra=extra)
    # The orchestrator dials the receiver only to apply an approved effect, never at start.
    return orchestrator_args(database_url, f"127.0.0.1:{free_port()}", address=address, extra=extra)


MODULES = {"receiver": RECEIVER_MODULE, "orchestrator": ORCHESTRATOR_MODULE}
PREFIXES = {"receiver": "DECISIONFLOW_RECEIVER", "orchestrator": "DECISIONFLOW_ORCHESTRATOR"}


def _receiver_calls(target: str) -> list[str]:
    """Apply one key CALLS times, each on a new connection; return the results' names."""
    request = apply_request(new_operation_id())
    results = []
    for _ in range(CALLS):
        with grpc.insecure_channel(target, options=[("grpc.enable_retries", 0)]) as channel:
            stub = effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel)
            result = stub.Apply(request, timeout=20).result
            results.append(effect_receiver_pb2.ApplyResult.Name(result))
    return results


def _orchestrator_calls(target: str) -> list[str]:
    """Start one review CALLS times, each on a new connection; return the operation ids."""
    ids = []
    for _ in range(CALLS):
        with grpc.insecure_channel(target, options=[("grpc.enable_retries", 0)]) as channel:
            review = review_pb2_grpc.ReviewServiceStub(channel)
            ids.append(review.StartReview(start_request(case_id="ONE-ADDRESS"), timeout=20).proposal.operation_id)
    return ids


def _second(service: str, database: Path, address: str, workers: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", MODULES[service], *_args(service, f"sqlite:///{database}", address, workers)],
        env=child_environment(ENV),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("service", ["receiver", "orchestrator"])
def test_a_second_instance_on_the_address_of_two_workers_is_refused(service: str, tmp_path: Path) -> None:
    first_db = tmp_path / "first.db"
    first: ServiceProcess = spawn(
        MODULES[service], _args(service, f"sqlite:///{first_db}", "127.0.0.1:0", 2), tmp_path, service, env=ENV
    )
    try:
        first.wait_serving()
        address = first.target
        for workers in (1, 2):
            database = tmp_path / f"second-{workers}.db"
            second = _second(service, database, address, workers)
            assert second.returncode == 1, second.stderr
            [line] = second.stderr.splitlines()
            entry = json.loads(line)
            assert entry["message"].startswith(
                f"decisionflow-{service}: cannot listen on {address} (--address / {PREFIXES[service]}_ADDRESS): "
                "Address already in use"
            ), entry
            assert "listening" not in second.stdout
            assert not database.exists()
        calls: Callable[[str], list[str]] = _receiver_calls if service == "receiver" else _orchestrator_calls
        answers = calls(first.target)
    finally:
        assert first.stop() == 0
    if service == "receiver":
        assert sorted(answers) == ["APPLY_RESULT_CREATED"] + ["APPLY_RESULT_REPLAYED"] * (CALLS - 1)
        assert count(f"sqlite:///{first_db}", "SELECT count(*) FROM effects") == 1
    else:
        assert len(set(answers)) == 1
        assert count(f"sqlite:///{first_db}", "SELECT count(*) FROM proposals") == 1


@pytest.mark.slow
def test_two_workers_are_refused_on_the_address_of_one_worker(tmp_path: Path) -> None:
    first = spawn(
        RECEIVER_MODULE, _args("receiver", f"sqlite:///{tmp_path / 'first.db'}", "127.0.0.1:0", 1), tmp_path, "r"
    )
    try:
        database = tmp_path / "second.db"
        second = _second("receiver", database, first.target, 2)
        assert second.returncode == 1, second.stderr
        [line] = second.stderr.splitlines()
        assert json.loads(line)["message"] == (
            f"decisionflow-receiver: cannot listen on {first.target} (--address / DECISIONFLOW_RECEIVER_ADDRESS): "
            "Address already in use"
        )
        assert not database.exists()
    finally:
        assert first.stop() == 0


def test_a_claim_is_held_until_released() -> None:
    with workers.claim("127.0.0.1:0") as address:
        port = int(address.rsplit(":", 1)[1])
        assert port != 0
        with (
            pytest.raises(workers.AddressClaimed, match=f"another service's workers hold port {port}"),
            workers.claim(address),
        ):
            pass
    with workers.claim(address) as again:
        assert again == address

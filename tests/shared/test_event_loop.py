"""Each serving process runs on uvloop's event loop: a receiver with ``--workers 2``, real processes,
answers an Apply, and each worker's listening line names the loop it serves on."""

from __future__ import annotations

import json
from pathlib import Path

import grpc

from decisionflow.processes import spawn
from decisionflow.stack import RECEIVER_MODULE, receiver_args
from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc
from tests.support.payloads import apply_request, new_operation_id


def test_every_worker_serves_on_uvloop(tmp_path: Path) -> None:
    receiver = spawn(
        RECEIVER_MODULE,
        receiver_args(f"sqlite:///{tmp_path / 'receiver.db'}", extra=["--workers", "2"]),
        tmp_path,
        "receiver",
    )
    try:
        with grpc.insecure_channel(receiver.target) as channel:
            answer = effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel).Apply(
                apply_request(new_operation_id()), timeout=10
            )
        assert answer.result == effect_receiver_pb2.APPLY_RESULT_CREATED
    finally:
        receiver.stop()
    lines = [json.loads(line) for line in receiver.log().splitlines() if line.startswith("{")]
    listening = {line["pid"]: line["message"] for line in lines if str(line["message"]).startswith("listening on")}
    assert len(listening) == 2
    assert all(message.endswith("; event loop: uvloop)") for message in listening.values()), listening

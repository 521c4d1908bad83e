"""Credentials reloaded on SIGHUP, without a restart: a new token is accepted, a revoked one refused,
a principal's groups are the file's new ones, and a file that cannot be used keeps the credentials in
force (logged, naming the file)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import effect_receiver_pb2, effect_receiver_pb2_grpc, review_pb2, review_pb2_grpc
from decisionflow_demo.launch import ProcessStack
from decisionflow_server.foundation.processes import child_environment
from decisionflow_server.runtime.auth import (
    RPC_ROLES,
    AuthInterceptor,
    Credentials,
    CredentialsReloader,
    Role,
    bearer_metadata,
    issue_token,
    load_credentials,
)
from decisionflow_server.runtime.auth import Unauthenticated as Refused
from tests.support.secure import hang_up
from tests.support.stack import CHECKPOINT_KEY

ROOT = Path(__file__).resolve().parents[2]
OP = "op-v1-" + "5" * 64
LOOKUP = "/decisionflow.v1.EffectReceiverService/Lookup"


def _admits(auth: AuthInterceptor, token: str) -> bool:
    try:
        auth.admit(LOOKUP, bearer_metadata(token), {})
    except Refused:
        return False
    return True


def test_a_reload_swaps_the_credentials_and_a_bad_file_keeps_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "credentials.json"
    old = issue_token(path, "reader-1", [Role.EFFECT_READER])
    auth = AuthInterceptor(load_credentials(path), RPC_ROLES, client_certificates=False)
    reload = CredentialsReloader(path, auth)
    new = issue_token(path, "reader-2", [Role.EFFECT_READER])
    assert not _admits(auth, new)

    with caplog.at_level(logging.INFO, logger="decisionflow.auth"):
        assert reload()
    assert _admits(auth, new) and _admits(auth, old)
    assert "credentials reloaded" in caplog.text and "2 principals" in caplog.text

    caplog.clear()
    path.write_text('{"tokens": [', encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="decisionflow.auth"):
        assert not reload()
    assert _admits(auth, new) and _admits(auth, old)
    [record] = caplog.records
    assert record.levelno == logging.ERROR and str(path) in record.getMessage()


def test_credentials_cannot_be_given_to_a_server_without_authentication() -> None:
    with pytest.raises(ValueError, match="authentication is off"):
        AuthInterceptor(None, RPC_ROLES).replace_credentials(Credentials())


def _token_new(path: Path, principal: str, role: str, *groups: str) -> str:
    """Run ``decisionflow token new`` as its own process, with a --group per group; return the token it printed."""
    command = ["token", "new", "--principal", principal, "--role", role, "--file", str(path)]
    command += [argument for group in groups for argument in ("--group", group)]
    done = subprocess.run(
        [sys.executable, "-m", "decisionflow_cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
        env=child_environment(),
    )
    return done.stdout.strip()


def _revoke(path: Path, principal: str) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    document["tokens"] = [entry for entry in document["tokens"] if entry["principal"] != principal]
    path.write_text(json.dumps(document), encoding="utf-8")


Probe = Callable[[grpc.Channel, str], grpc.StatusCode]


def _get_operation(channel: grpc.Channel, token: str) -> grpc.StatusCode:
    request = review_pb2.GetOperationRequest(operation_id=OP)
    try:
        review_pb2_grpc.ReviewServiceStub(channel).GetOperation(request, timeout=5, metadata=bearer_metadata(token))
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def _lookup(channel: grpc.Channel, token: str) -> grpc.StatusCode:
    request = effect_receiver_pb2.LookupRequest(operation_id=OP)
    try:
        effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel).Lookup(
            request, timeout=5, metadata=bearer_metadata(token)
        )
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


@pytest.mark.slow
@pytest.mark.parametrize(
    ("service", "role", "admitted"),
    [
        pytest.param("orchestrator", "reviewer", grpc.StatusCode.NOT_FOUND, id="orchestrator"),
        pytest.param("receiver", "effect_reader", grpc.StatusCode.OK, id="receiver"),
    ],
)
def test_sighup_reloads_the_credentials_file_of_a_running_server(
    tmp_path: Path, service: str, role: str, admitted: grpc.StatusCode
) -> None:
    path = tmp_path / "credentials.json"
    first = _token_new(path, "first", role)
    stack = ProcessStack(tmp_path, f"sqlite:///{tmp_path / 'r.db'}", f"sqlite:///{tmp_path / 'o.db'}", CHECKPOINT_KEY)
    credentials = ["--credentials-file", str(path)]
    probe: Probe = _get_operation if service == "orchestrator" else _lookup
    try:
        receiver = stack.start_receiver(args=credentials if service == "receiver" else ())
        server = receiver if service == "receiver" else stack.start_orchestrator(args=credentials)
        with grpc.insecure_channel(server.target) as channel:
            assert probe(channel, first) == admitted
            second = _token_new(path, "second", role)
            assert probe(channel, second) == grpc.StatusCode.UNAUTHENTICATED

            hang_up(server, "credentials reloaded", 0)
            assert probe(channel, second) == admitted and probe(channel, first) == admitted

            _revoke(path, "first")
            hang_up(server, "credentials reloaded", 1)
            assert probe(channel, first) == grpc.StatusCode.UNAUTHENTICATED
            assert probe(channel, second) == admitted

            path.write_text("not json", encoding="utf-8")
            hang_up(server, "credentials not reloaded", 0)
            assert probe(channel, second) == admitted
            assert probe(channel, first) == grpc.StatusCode.UNAUTHENTICATED
        [refusal] = [line for line in server.log().splitlines() if "not reloaded" in line]
        assert str(path) in refusal
    finally:
        stack.close()


def _groups(channel: grpc.Channel, token: str) -> list[str]:
    answer = review_pb2_grpc.ReviewServiceStub(channel).GetCaller(
        review_pb2.GetCallerRequest(), timeout=5, metadata=bearer_metadata(token)
    )
    return list(answer.groups)


def _set_groups(path: Path, principal: str, groups: list[str]) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    for entry in document["tokens"]:
        if entry["principal"] == principal:
            entry["groups"] = groups
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.mark.slow
def test_groups_given_to_token_new_are_answered_by_get_caller_and_follow_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    pia = _token_new(path, "pia", "reviewer", "payments-leads", "emea")
    stack = ProcessStack(tmp_path, f"sqlite:///{tmp_path / 'r.db'}", f"sqlite:///{tmp_path / 'o.db'}", CHECKPOINT_KEY)
    try:
        stack.start_receiver()
        server = stack.start_orchestrator(args=["--credentials-file", str(path)])
        with grpc.insecure_channel(server.target) as channel:
            assert _groups(channel, pia) == ["emea", "payments-leads"]

            _set_groups(path, "pia", ["payments-leads", "apac"])
            hang_up(server, "credentials reloaded", 0)
            assert _groups(channel, pia) == ["apac", "payments-leads"]

            # A bad group name keeps the groups in force, and the log names the entry.
            _set_groups(path, "pia", ["Payments"])
            hang_up(server, "credentials not reloaded", 0)
            assert _groups(channel, pia) == ["apac", "payments-leads"]
        [refusal] = [line for line in server.log().splitlines() if "not reloaded" in line]
        assert "tokens[0].groups[0]: invalid group name 'Payments'" in refusal
    finally:
        stack.close()

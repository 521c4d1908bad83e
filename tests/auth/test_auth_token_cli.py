"""``decisionflow token new`` through the command line's main, and the token it prints on a real server."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import grpc
import pytest

import decisionflow_cli as cli
from decisionflow.v1 import review_pb2, review_pb2_grpc
from decisionflow_server.runtime.auth import Principal, Role, load_credentials, token_sha256
from tests.support.auth import ContractRecorder, serve


def new_token(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["token", "new", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_new_token_is_printed_once_stored_hashed_and_authenticates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "credentials.json"
    code, out, err = new_token(
        capsys, "--principal", "carol", "--role", "reviewer", "--role", "author", "--file", str(path)
    )
    assert (code, err) == (0, "")
    token = out.removesuffix("\n")
    assert out == token + "\n" and len(token) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token not in path.read_text()
    assert json.loads(path.read_text())["tokens"][0]["sha256"] == token_sha256(token)

    recorder = ContractRecorder()

    async def scenario() -> None:
        async with (
            serve(recorder.register, credentials=load_credentials(path)) as running,
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel,
        ):
            stub = review_pb2_grpc.ReviewServiceStub(channel)
            await stub.Approve(review_pb2.ApproveRequest(), metadata=(("authorization", f"Bearer {token}"),))

    asyncio.run(scenario())
    assert recorder.principals == [Principal("carol", frozenset({Role.REVIEWER, Role.AUTHOR}), "token")]


def test_a_second_token_is_appended(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "credentials.json"
    _, first, _ = new_token(capsys, "--principal", "carol", "--role", "operator", "--file", str(path))
    _, second, _ = new_token(capsys, "--principal", "dave", "--role", "effect_reader", "--file", str(path))
    credentials = load_credentials(path)
    assert credentials.principal_for_token(first.strip()) == Principal("carol", frozenset({Role.OPERATOR}), "token")
    assert credentials.principal_for_token(second.strip()) == Principal(
        "dave", frozenset({Role.EFFECT_READER}), "token"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--principal", "carol", "--role", "admin"], "unknown role 'admin'"),
        (["--principal", "", "--role", "reviewer"], "principal: must be a non-empty string"),
        (["--principal", "carol"], "--role"),
        (["--role", "reviewer"], "--principal"),
        (["--principal", "carol", "--role", "reviewer", "--group", "Leads"], "groups[0]: invalid group name 'Leads'"),
        (
            ["--principal", "carol", "--role", "reviewer", "--group", "emea", "--group", "emea"],
            "groups[1]: group 'emea' is listed twice",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = tmp_path / "credentials.json"
    code, out, err = new_token(capsys, *args, "--file", str(path))
    assert (code, out) == (2, "")
    assert message in err
    assert err.count("\n") == 1
    assert not path.exists()


def test_a_malformed_credentials_file_is_left_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "credentials.json"
    path.write_text('{"tokens": [{"principal": "x"}]}')
    code, out, err = new_token(capsys, "--principal", "carol", "--role", "reviewer", "--file", str(path))
    assert (code, out) == (2, "")
    assert "missing field 'sha256'" in err and err.count("\n") == 1
    assert path.read_text() == '{"tokens": [{"principal": "x"}]}'


def test_an_unwritable_location_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "absent-directory" / "credentials.json"
    code, out, err = new_token(capsys, "--principal", "carol", "--role", "reviewer", "--file", str(path))
    assert (code, out) == (1, "")
    assert "cannot write" in err and err.count("\n") == 1

"""The review commands against a real orchestrator with authentication on: JSON out, exit status 0/42/3/1/2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from decisionflow.identity import identities
from decisionflow.v1 import effect_receiver_pb2
from decisionflow_cli import main
from decisionflow_cli.review import edit_from_json
from decisionflow_server.foundation.processes import free_port
from decisionflow_server.foundation.proposal_json import ProposalFormatError, proposal_from_json
from tests.support.payloads import sample_payload
from tests.support.review_cli import Cli, evidence, proposal_file
from tests.support.stack import T1042_BODY

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

LOSE_EVERY_REPLY = "receiver.commit_then_lose_reply=raise"


def _edit_file(directory: Path, hold_version: int, body: str = T1042_BODY) -> Path:
    path = directory / f"edit-v{hold_version}.json"
    policy = {"name": "support-replies", "version_label": "2026-10", "allowance_units": 9, "rules": {}}
    path.write_text(json.dumps({"body": body, "evidence": evidence(hold_version), "policy": policy}))
    return path


def test_start_prints_the_operation_id_computed_from_the_content(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = make_cli()
    file = proposal_file(tmp_path)
    expected = identities(*proposal_from_json(file.read_text())).operation_id

    first = cli("start", str(file), principal="ava")
    again = cli("start", str(file), principal="ava")

    assert first.exit_code == 0, first.stderr
    assert first.document["operation_id"] == expected
    assert first.document["state"] == "PENDING_REVIEW"
    assert first.document["created"] is True
    assert again.exit_code == 0 and again.document["operation_id"] == expected
    assert again.document["created"] is False
    assert "started" in first.stderr and expected in first.stderr


def test_approve_commits_then_a_repeat_is_a_replay_and_decline_is_a_conflict(
    make_cli: Callable[..., Cli], tmp_path: Path
) -> None:
    cli = make_cli()
    op = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])

    approved = cli("approve", op)
    again = cli("approve", op, "--json")  # taken as ops and receiver take it: the same one JSON object
    declined = cli("decline", op, "--json")

    assert approved.exit_code == 0, approved.stderr
    assert approved.document["outcome"] == "COMMITTED" and approved.document["replay"] is False
    receipt = approved.document["receipt"]
    assert isinstance(receipt, dict) and receipt["receipt_id"]
    assert again.exit_code == 0 and again.document["replay"] is True
    assert again.document["receipt"] == receipt
    assert declined.exit_code == 3
    assert declined.error["reason"] == "DECISION_CONFLICT" and declined.error["definite"] is True
    assert "refused as a conflict" in declined.stderr
    assert cli.stack.effects("T-1042") == 1


def test_decline_is_done_and_writes_no_effect(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = make_cli()
    op = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])

    declined = cli("decline", op)
    status = cli("status", op, principal="ops")

    assert declined.exit_code == 0 and declined.document["outcome"] == "DECLINED"
    assert status.exit_code == 0 and status.document["state"] == "DECLINED"
    assert cli.stack.effects("T-1042") == 0


def test_show_reads_by_operation_and_by_case(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = make_cli()
    op = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])

    by_operation = cli("show", op, principal="ava")
    by_case = cli("show", "--case", "T-1042")

    assert by_operation.exit_code == 0 and by_case.exit_code == 0
    assert by_operation.document["operation_id"] == by_case.document["operation_id"] == op
    assert by_case.document["current"] is True and by_case.document["state"] == "PENDING_REVIEW"
    proposal = by_case.document["proposal"]
    assert isinstance(proposal, dict) and proposal["body"] == T1042_BODY


def test_an_approval_from_a_stale_tab_is_refused_with_the_current_id(
    make_cli: Callable[..., Cli], tmp_path: Path
) -> None:
    cli = make_cli()
    v2 = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])

    edited = cli("edit", v2, str(_edit_file(tmp_path, 4)), principal="ava")
    v4 = edited.document["operation_id"]
    stale = cli("approve", v2)
    stale_edit = cli("edit", v2, str(_edit_file(tmp_path, 5)), principal="ava")

    assert edited.exit_code == 0 and v4 != v2
    assert edited.document["parent_operation_id"] == v2 and edited.document["state"] == "PENDING_REVIEW"
    assert stale.exit_code == 3
    assert stale.error["reason"] == "STALE_PROPOSAL"
    assert isinstance(stale.error["metadata"], dict) and stale.error["metadata"]["current_operation_id"] == v4
    assert "refused as stale" in stale.stderr
    assert stale_edit.exit_code == 3 and stale_edit.error["reason"] == "STALE_PROPOSAL"
    assert cli.stack.effects("T-1042") == 0


def test_other_content_for_an_open_case_is_refused_until_it_names_the_open_proposal(
    make_cli: Callable[..., Cli], tmp_path: Path
) -> None:
    cli = make_cli()
    first = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])
    other = str(proposal_file(tmp_path, body=T1042_BODY + " Thanks.", name="other.json"))

    refused = cli("start", other, principal="ava")
    replaced = cli("start", other, "--expected-operation-id", first, principal="ava")

    assert refused.exit_code == 3 and refused.error["reason"] == "CASE_HAS_OPEN_PROPOSAL"
    assert refused.error["metadata"] == {"case_id": "T-1042", "current_operation_id": first}
    assert f"--expected-operation-id {first} to replace it" in refused.stderr
    assert replaced.exit_code == 0 and replaced.document["created"] is True
    assert cli("status", first).document["state"] == "SUPERSEDED"


def test_a_lost_reply_is_outcome_unknown_exit_42(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = make_cli(receiver_failpoints=LOSE_EVERY_REPLY)
    op = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])

    unknown = cli("approve", op, "--timeout", "2")
    status = cli("status", op)

    assert unknown.exit_code == 42, unknown.stderr
    assert unknown.document["outcome"] == "UNKNOWN" and unknown.document["state"] == "UNKNOWN"
    assert unknown.document["receipt"] is None
    assert "outcome UNKNOWN" in unknown.stderr
    assert status.exit_code == 0 and status.document["state"] == "UNKNOWN"
    assert cli.stack.effects("T-1042") == 1  # the receiver did commit; only the reply was lost


def test_an_effect_the_receiver_refuses_is_rejected_exit_3(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = make_cli()
    file = proposal_file(tmp_path)
    op = identities(*proposal_from_json(file.read_text())).operation_id
    # Another payload already holds the key, so the receiver refuses the orchestrator's Apply for good.
    squatter = sample_payload(op, body="someone else's reply", evidence_id="", policy_id="", reviewer="mallory")
    cli.stack.receiver().Apply(
        effect_receiver_pb2.ApplyRequest(
            operation_id=op,
            case_id="T-1042",
            kind="record_support_review",
            payload=squatter.encode(),
            payload_digest=squatter.digest(),
        ),
        timeout=5,
    )
    assert cli("start", str(file), principal="ava").exit_code == 0

    rejected = cli("approve", op)

    assert rejected.exit_code == 3
    assert rejected.document["outcome"] == "REJECTED" and rejected.document["state"] == "REJECTED"
    assert "REJECTED" in rejected.stderr


@pytest.mark.parametrize(
    ("principal", "reason"),
    [(None, "UNAUTHENTICATED"), ("ava", "PERMISSION_DENIED")],
)
def test_approving_without_the_reviewer_role_is_refused(
    make_cli: Callable[..., Cli], tmp_path: Path, principal: str | None, reason: str
) -> None:
    cli = make_cli()
    op = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])

    refused = cli("approve", op, principal=principal)

    assert refused.exit_code == 3
    assert refused.error["code"] == reason and refused.error["definite"] is True
    assert cli("status", op).document["state"] == "PENDING_REVIEW"


def test_unknown_and_malformed_operation_ids_are_refused(make_cli: Callable[..., Cli]) -> None:
    cli = make_cli()

    missing = cli("status", "op-v1-" + "0" * 64)
    malformed = cli("approve", "not-an-operation-id")

    assert missing.exit_code == 3 and missing.error["code"] == "NOT_FOUND"
    assert malformed.exit_code == 3 and malformed.error["code"] == "INVALID_ARGUMENT"


def test_an_unreachable_orchestrator_is_an_error_exit_1(
    tokens: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    target = f"127.0.0.1:{free_port()}"

    exit_code = main(["status", "op-v1-" + "0" * 64, "--target", target, "--timeout", "1"])
    out, err = capsys.readouterr()

    assert exit_code == 1
    error = json.loads(out)["error"]
    assert error["code"] == "UNAVAILABLE" and error["definite"] is False and error["attempts"] > 1
    assert "may have acted" in err and len(err.strip().splitlines()) == 1


def test_connection_settings_come_from_the_environment(
    make_cli: Callable[..., Cli], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = make_cli()
    file = proposal_file(tmp_path)
    monkeypatch.setenv("DECISIONFLOW_ORCHESTRATOR_TARGET", cli.target)
    monkeypatch.setenv("DECISIONFLOW_TOKEN_FILE", str(cli.tokens["ava"]))

    exit_code = main(["start", str(file)])

    assert exit_code == 0
    assert json.loads(capsys.readouterr().out)["state"] == "PENDING_REVIEW"


TIMEOUT_REFUSED = "--timeout (env DECISIONFLOW_TIMEOUT): expected a positive number of seconds"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["approve", "op-v1-x", "--timeout", "0"], TIMEOUT_REFUSED),
        (["approve", "op-v1-x", "--timeout", "soon"], TIMEOUT_REFUSED),
        (["approve", "op-v1-x", "--token-file", "/nonexistent/token"], "cannot read token file"),
        (["start", "/nonexistent/proposal.json"], "cannot read input"),
        (["show"], "one of the arguments"),
        (["show", "op-v1-x", "--case", "T-1042"], "not allowed with"),
    ],
)
def test_bad_usage_exits_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    exit_code = main(argv)
    out, err = capsys.readouterr()

    assert exit_code == 2
    assert out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_malformed_proposal_file_is_refused_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "bad.json"
    file.write_text(json.dumps({"case_id": "T-1042", "action": "record_support_review", "body": "x"}))

    # No server listens at the target: the file is refused first.
    exit_code = main(["start", str(file), "--target", f"127.0.0.1:{free_port()}"])

    assert exit_code == 2
    assert "missing field 'evidence'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"body": "x", "evidence": [], "policy": {}, "case_id": "T-1"}, "edit: unknown field 'case_id'"),
        ({"body": "x", "evidence": []}, "edit: missing field 'policy'"),
        ([], "edit: must be an object"),
        ({"body": 1, "evidence": [], "policy": {}}, "body: must be a string"),
        (
            {"body": "x", "evidence": [{"source_id": "A", "version": -1, "quotation": "q"}], "policy": {}},
            "evidence[0].version",
        ),
    ],
)
def test_edit_files_are_read_as_strictly_as_proposals(document: object, message: str) -> None:
    with pytest.raises(ProposalFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        edit_from_json(json.dumps(document))


def test_edit_files_refuse_duplicate_keys() -> None:
    with pytest.raises(ProposalFormatError, match="duplicate JSON key 'body'"):
        edit_from_json('{"body": "a", "body": "b", "evidence": [], "policy": {}}')


def test_every_command_documents_its_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("start", "show", "edit", "approve", "decline", "status"):
        assert main([command, "--help"]) == 0
        help_text = " ".join(capsys.readouterr().out.split())
        assert "0 done" in help_text and "42 outcome Unknown" in help_text
        assert "3 refused" in help_text and "1 error" in help_text


@pytest.mark.slow
def test_the_command_runs_as_a_separate_process(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = make_cli(receiver_failpoints=LOSE_EVERY_REPLY)
    op = str(cli("start", str(proposal_file(tmp_path)), principal="ava").document["operation_id"])
    token = ["--target", cli.target, "--token-file", str(cli.tokens["rita"]), "--timeout", "2"]

    done = subprocess.run(
        [sys.executable, "-m", "decisionflow_cli", "approve", op, *token],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 42, done.stderr
    assert json.loads(done.stdout)["outcome"] == "UNKNOWN"
    assert done.stderr.count("\n") == 1 and "outcome UNKNOWN" in done.stderr

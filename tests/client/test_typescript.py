"""The TypeScript client: its generated code matches the protos, and its example runs under Node
against real services (a retry through a lost reply, a stale tab)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from decisionflow.bearer import bearer_metadata
from decisionflow.v1 import review_pb2_grpc
from decisionflow_demo.launch import ProcessStack
from decisionflow_server.foundation.processes import free_port
from decisionflow_server.runtime.auth import Role, issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from orchestrator.quotas import AuthorLimits
from tests.support.client_examples import ExampleServices, check_story
from tests.support.stack import CHECKPOINT_KEY, Stack, count, open_stack, start_request
from tests.support.typescript import TypeScriptPackage

BUF = Path(sys.executable).parent / "buf"


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_the_committed_typescript_code_is_what_buf_generates(
    typescript_package: TypeScriptPackage, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(BUF), "generate", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=typescript_package.folder,
    )

    assert done.returncode == 0, done.stderr
    generated, committed = _files(tmp_path / "src" / "gen"), _files(typescript_package.folder / "src" / "gen")
    assert sorted(generated) == sorted(committed), "run `npm run generate` in clients/typescript"
    assert generated == committed, "run `npm run generate` in clients/typescript"
    assert "decisionflow/v1/review_pb.ts" in generated and "google/rpc/error_details_pb.ts" in generated


@pytest.mark.slow
def test_the_typescript_example_approves_once_through_a_lost_reply_and_meets_a_stale_tab(
    typescript_package: TypeScriptPackage, example_services: ExampleServices
) -> None:
    done = typescript_package.run("dist/examples/approve.js", example_services.target)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    check_story(done.stdout, example_services)


@pytest.mark.slow
def test_the_typescript_client_sends_a_token_in_cleartext_only_to_loopback(
    typescript_package: TypeScriptPackage,
) -> None:
    script = """
import { reviewClient } from "./dist/src/client.js";
const told = {};
for (const [target, options] of JSON.parse(process.argv[1])) {
  try { reviewClient(target, options); told[target + " " + JSON.stringify(options)] = "sent"; }
  catch (error) { told[target + " " + JSON.stringify(options)] = "refused"; }
}
console.log(JSON.stringify(told));
"""
    cases = [
        ["127.0.0.1:50051", {"token": "t"}],
        ["[::1]:50051", {"token": "t"}],
        ["localhost:50051", {"token": "t"}],
        ["orchestrator:50051", {"token": "t"}],
        ["127.0.0.1.example:50051", {"token": "t"}],
        ["orchestrator:50051", {"token": "t", "scheme": "https"}],
        ["orchestrator:50051", {"token": "t", "allowCleartextToken": True}],
        ["orchestrator:50051", {}],
    ]

    done = typescript_package.run("--input-type=module", "-e", script, json.dumps(cases))

    assert done.returncode == 0, done.stderr
    assert list(json.loads(done.stdout).values()) == [
        "sent", "sent", "sent", "refused", "refused", "sent", "sent", "sent"
    ]  # fmt: skip


@pytest.mark.slow
def test_the_refusal_helper_reads_a_real_refusals_error_info_and_field_violations(
    typescript_package: TypeScriptPackage, example_services: ExampleServices
) -> None:
    script = """
import { create } from "@bufbuild/protobuf";
import { ApproveRequestSchema, Decision, GetOperationRequestSchema } from "./dist/src/index.js";
import { refusalOf, reviewClient } from "./dist/src/index.js";
const reviews = reviewClient(process.argv[1]);
const [unknown, missing] = ["op-v1-" + "0".repeat(64), "op-v1-" + "1".repeat(64)];
const told = [];
for (const call of [
  () => reviews.approve(create(ApproveRequestSchema, { operationId: unknown, decision: Decision.UNSPECIFIED })),
  () => reviews.getOperation(create(GetOperationRequestSchema, { operationId: missing })),
]) {
  try { await call(); told.push(null); } catch (error) { told.push(refusalOf(error)); }
}
console.log(JSON.stringify(told));
"""
    done = typescript_package.run("--input-type=module", "-e", script, example_services.target)

    assert done.returncode == 0, done.stderr
    omitted, missing = json.loads(done.stdout)
    assert (omitted["code"], omitted["reason"], omitted["domain"]) == (3, "DECISION_REQUIRED", "decisionflow.v1")
    assert [v["field"] for v in omitted["violations"]] == ["decision"]
    assert (omitted["definite"], omitted["retry"]) == (True, "no")
    assert (missing["code"], missing["reason"], missing["definite"]) == (5, "NOT_FOUND", True)
    assert missing["metadata"] == {"operation_id": "op-v1-" + "1" * 64}


CRASH_SCRIPT = """
import { create } from "@bufbuild/protobuf";
import { ApproveRequestSchema, Decision, Outcome, codeName } from "./dist/src/index.js";
import { refusalOf, reviewClient, withRetries } from "./dist/src/index.js";
const [target, operationId] = process.argv.slice(1);
const reviews = reviewClient(target, { timeoutMs: 5_000 });
const request = create(ApproveRequestSchema, { operationId, decision: Decision.APPROVE });
const seen = [];
const policy = { maxAttempts: 60, maxTotalMs: 60_000, initialBackoffMs: 200, maxBackoffMs: 1_000 };
try {
  const answer = await withRetries(async () => {
    try { return await reviews.approve(request); }
    catch (error) { const r = refusalOf(error); seen.push([codeName(r.code), r.definite]); throw error; }
  }, policy);
  console.log(JSON.stringify({ seen, outcome: Outcome[answer.outcome], replay: answer.replay }));
} catch (error) {
  console.log(JSON.stringify({ seen, failed: codeName(refusalOf(error).code) }));
}
"""


@pytest.mark.slow
def test_with_retries_carries_an_approve_through_an_orchestrator_crash(
    typescript_package: TypeScriptPackage, tmp_path: Path
) -> None:
    # Node's HTTP/2 transport reports the crash as CANCELLED or ABORTED (gRPC Python: UNAVAILABLE); the caller
    # did not cancel, and Approve is idempotent by its operation id, so withRetries repeats it.
    address = f"127.0.0.1:{free_port()}"
    stack = ProcessStack(
        tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}", f"sqlite:///{tmp_path / 'orch.db'}", CHECKPOINT_KEY
    )
    try:
        stack.start_receiver()
        # The crashed attempt's lease pins the operation for the attempt budget plus 1 s: a 1 s budget
        # lets the restarted orchestrator's replay wait it out within the client's deadline and drive.
        budget = ["--receiver-timeout-seconds", "1"]
        crashing = stack.start_orchestrator(
            "crashing", failpoints="orchestrator.after_receiver_ok=exit@1", args=["--address", address, *budget]
        )
        with grpc.insecure_channel(address) as channel:
            operation_id = review_pb2_grpc.ReviewServiceStub(channel).StartReview(start_request(), timeout=15)
        node = subprocess.Popen(
            [
                typescript_package.node,
                "--input-type=module",
                "-e",
                CRASH_SCRIPT,
                address,
                operation_id.proposal.operation_id,
            ],
            cwd=typescript_package.folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert crashing.process.wait(30) == 86  # the failpoint ended it after the effect committed
        stack.start_orchestrator("restarted", args=["--address", address, *budget])
        out, err = node.communicate(timeout=90)
    finally:
        stack.close()

    assert node.returncode == 0, err
    told = json.loads(out)
    # CANCELLED, or ABORTED when the crash reset the socket first (timing): both indeterminate, both retried.
    assert told["seen"][0] in (["CANCELLED", False], ["ABORTED", False]), told
    assert (told.get("outcome"), told.get("replay")) == ("COMMITTED", True), told
    assert count(stack.receiver_url, "SELECT count(*) FROM effects") == 1


@pytest.mark.slow
def test_with_retries_never_repeats_a_call_its_caller_cancelled(typescript_package: TypeScriptPackage) -> None:
    script = """
import { create } from "@bufbuild/protobuf";
import { ApproveRequestSchema, Decision, codeName, refusalOf, reviewClient, withRetries } from "./dist/src/index.js";
const reviews = reviewClient("127.0.0.1:9");
const request = create(ApproveRequestSchema, { operationId: "op-v1-" + "0".repeat(64), decision: Decision.APPROVE });
const stop = new AbortController();
stop.abort();
let attempts = 0;
try {
  const call = () => { attempts++; return reviews.approve(request, { signal: stop.signal }); };
  await withRetries(call, undefined, stop.signal);
} catch (error) {
  console.log(JSON.stringify({ attempts, code: codeName(refusalOf(error).code) }));
}
"""
    done = typescript_package.run("--input-type=module", "-e", script)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"attempts": 1, "code": "CANCELLED"}


@pytest.mark.slow
def test_the_refusal_helper_reads_a_spent_budgets_delay_and_with_retries_does_not_outwait_its_call(
    typescript_package: TypeScriptPackage, make_stack: Callable[..., Stack]
) -> None:
    # One call per 1,000 s: the second call is told to wait about that long, longer than any policy's time.
    limits = AuthorLimits(calls_per_second=0.001, call_burst=1, content_bytes_per_minute=0, open_reviews=0)
    stack = make_stack(author_limits=limits)
    script = """
import { create } from "@bufbuild/protobuf";
import { StartReviewRequestSchema, codeName, refusalOf, reviewClient, withRetries } from "./dist/src/index.js";
const reviews = reviewClient(process.argv[1]);
const content = JSON.parse(process.argv[2]);
const start = (caseId) => reviews.startReview(create(StartReviewRequestSchema, { ...content, caseId }));
await start("T-1");
let attempts = 0;
try {
  await withRetries(() => { attempts++; return start("T-2"); });
} catch (error) {
  const r = refusalOf(error);
  console.log(JSON.stringify({ attempts, code: codeName(r.code), reason: r.reason, definite: r.definite,
    retry: r.retry, retryAfterMs: r.retryAfterMs, metadata: r.metadata }));
}
"""
    request = {
        "action": "record_support_review",
        "body": "Please update to 4.2.1.",
        "evidence": [{"sourceId": "KB-12", "version": "1", "quotation": "Update to 4.2.1."}],
        "policy": {"name": "support-replies", "versionLabel": "2026-10", "allowanceUnits": "9"},
    }
    done = typescript_package.run(
        "--input-type=module", "-e", script, f"127.0.0.1:{stack.orchestrator_port}", json.dumps(request)
    )

    assert done.returncode == 0, done.stderr
    told = json.loads(done.stdout)
    assert (told["attempts"], told["code"], told["reason"]) == (1, "RESOURCE_EXHAUSTED", "CALL_RATE_EXCEEDED")
    assert (told["definite"], told["retry"], told["metadata"]["principal"]) == (True, "automatic", "anonymous")
    assert 900_000 < told["retryAfterMs"] <= 1_000_000


SEVERAL_REPLICAS_SCRIPT = """
import { create } from "@bufbuild/protobuf";
import { ApproveRequestSchema, Decision, OperationState, reviewClient, withRetries } from "./dist/src/index.js";
const reviews = reviewClient(process.argv[1]);
const answers = [];
for (const operationId of JSON.parse(process.argv[2])) {
  const request = create(ApproveRequestSchema, { operationId, decision: Decision.APPROVE });
  const answer = await withRetries(() => reviews.approve(request));
  answers.push(OperationState[answer.operation.state]);
}
console.log(JSON.stringify(answers));
"""


@pytest.mark.slow
def test_the_typescript_client_given_two_replicas_takes_each_call_to_the_one_that_answers(
    typescript_package: TypeScriptPackage, make_stack: Callable[..., Stack]
) -> None:
    stack = make_stack()
    serving = stack.orchestrator_port
    stack.start_orchestrator()  # a second replica on the same database
    stopped = stack.orchestrator_port
    review = stack.review()
    ops = [review.StartReview(start_request(case_id=f"T-{n}"), timeout=15).proposal.operation_id for n in range(4)]
    stack.stop_orchestrator()  # the second replica is down: every other call reaches no one

    target = f"127.0.0.1:{serving},127.0.0.1:{stopped}"
    done = typescript_package.run("--input-type=module", "-e", SEVERAL_REPLICAS_SCRIPT, target, json.dumps(ops))

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["COMMITTED"] * 4
    assert stack.effects() == 4


RULE_SCRIPT = """
import { create } from "@bufbuild/protobuf";
import { ApproveRequestSchema, Decision, GetOperationRequestSchema, Outcome } from "./dist/src/index.js";
import { awaitingApprovals, refusalOf, reviewClient, reviewStanding } from "./dist/src/index.js";
const [target, operationId, lena, oli] = process.argv.slice(1);
const request = create(ApproveRequestSchema, { operationId, decision: Decision.APPROVE });
const voted = await reviewClient(target, { token: lena }).approve(request);
const reads = reviewClient(target, { token: oli });
const read = await reads.getOperation(create(GetOperationRequestSchema, { operationId }));
let refused = null;
try { await reviewClient(target, { token: oli }).approve(request); } catch (error) { refused = refusalOf(error); }
const standing = reviewStanding(voted.operation);
console.log(JSON.stringify({
  outcome: Outcome[voted.outcome], awaiting: awaitingApprovals(voted.outcome), standing,
  deadlineIsDate: standing.deadline instanceof Date, read: reviewStanding(read.operation),
  refused: [refused.reason, refused.metadata.vote_refusal, refused.definite],
}));
"""


@pytest.mark.slow
def test_the_typescript_client_reads_a_vote_awaiting_approvals_and_where_the_review_stands(
    typescript_package: TypeScriptPackage, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials.json"
    people = {"ava": ([Role.AUTHOR], []), "lena": ([Role.REVIEWER], ["leads"]), "oli": ([Role.REVIEWER], [])}
    tokens = {name: issue_token(credentials, name, roles, groups) for name, (roles, groups) in people.items()}
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'version = 1\n\n[actions.record_support_review]\ndeadline = "3d"\n\n'
        '[[actions.record_support_review.stages]]\nname = "leads"\ngroups = ["leads"]\napprovals = 2\n',
        encoding="utf-8",
    )
    stack = open_stack(tmp_path, security=ServerSecurity(credentials_file=credentials), review_rules_file=rules)
    try:
        started = stack.review().StartReview(start_request(), timeout=30, metadata=bearer_metadata(tokens["ava"]))
        op = started.proposal.operation_id
        target = f"127.0.0.1:{stack.orchestrator_port}"
        argv = [target, op, tokens["lena"], tokens["oli"]]
        done = typescript_package.run("--input-type=module", "-e", RULE_SCRIPT, *argv)
        effects = stack.effects()
    finally:
        stack.close()

    assert done.returncode == 0, done.stderr
    told = json.loads(done.stdout)
    assert (told["outcome"], told["awaiting"], told["deadlineIsDate"]) == ("AWAITING_APPROVALS", True, True)
    standing = told["standing"]
    assert {key: standing[key] for key in standing if key not in ("deadline", "stages")} == {
        "stageIndex": 0,
        "stageName": "leads",
        "stageCount": 1,
        "approvalsGiven": ["lena"],
        "approvalsNeeded": 2,
        "approvalsMissing": 1,
        "eligibleGroups": ["leads"],
        "escalated": False,
    }  # due is undefined, so JSON leaves it out
    [leads] = standing["stages"]
    assert {key: leads[key] for key in leads if key != "started"} == {
        "stageIndex": 0,
        "stageName": "leads",
        "approvalsGiven": ["lena"],
        "approvalsNeeded": 2,
        "declines": [],
        "declinesToEnd": 1,
    }  # not due, not escalated, not ended: left out
    assert leads["started"].endswith("Z")  # a Date, written as ISO 8601
    assert told["read"] == standing
    assert told["refused"] == ["NOT_ELIGIBLE_TO_DECIDE", "not_eligible", True]
    assert effects == 0

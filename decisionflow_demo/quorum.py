"""Step 7 of docs/demo.md: a review rule put in force while the orchestrator runs. The operator writes a
rule that every support reply needs two approvals from the group ``leads``, checks it and sends SIGHUP.
T-1043's review, started before, keeps the rule it started under: one approval by any reviewer decides
it. T-1044, started after, waits for two leads: the first lead's approval is a vote that writes no
effect, a reviewer outside the group is refused with nothing written, and the second lead's approval
writes the one effect. The votes go as raw ApproveRequests, so the transcript shows the wire's answer."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from decisionflow import reasons
from decisionflow.channels import insecure_channel
from decisionflow.client import map_rpc_error
from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow_demo import workspace as ws
from decisionflow_demo.children import DemoError
from decisionflow_demo.stack import DemoStack, short
from decisionflow_server.runtime.auth import bearer_metadata

FIRST_LEAD, SECOND_LEAD = ws.LEADS[0], ws.LEADS[1]
AWAITING, COMMITTED = "AWAITING_APPROVALS", "COMMITTED"


@dataclass(frozen=True)
class QuorumSeen:
    """What step 7 observed, one flag per claim its transcript makes."""

    earlier_rule_kept: bool
    """The review started before the rule was decided by one approval of a reviewer outside ``leads``."""
    not_eligible_refused: bool
    """The reviewer outside ``leads`` was refused NOT_ELIGIBLE_TO_DECIDE, no vote recorded, no effect."""
    quorum_two_of_three: bool
    """The first lead's approval answered AWAITING_APPROVALS with no effect, the second COMMITTED, one effect."""


@dataclass(frozen=True)
class Answer:
    """What one raw Approve answered: an outcome (the status code's name and reason when refused)."""

    outcome: str = ""
    progress: review_pb2.ReviewProgress | None = None
    reviewer: str = ""
    code: str = "OK"
    reason: str = ""
    vote_refusal: str = ""


class Quorum:
    """Puts the rule in force on the demo's orchestrator and has reviewers decide under it."""

    def __init__(self, stack: DemoStack) -> None:
        self.stack = stack
        self.ws = stack.ws
        self.say = stack.say

    def shows(self, earlier_operation_id: str) -> QuorumSeen:
        """Put the rule in force, decide earlier_operation_id (started before it) and T-1044 (after it)."""
        self._put_in_force()
        earlier = self.stack.review("approve", [earlier_operation_id], ws.REVIEWER, short(earlier_operation_id))
        outcome = earlier.document.get("outcome")
        earlier_effects = self.stack.effects(ws.STALE_CASE_ID)
        self.say.line(
            f"-> outcome {outcome}, exit {earlier.exit_code}: {ws.STALE_CASE_ID} began before the rule and keeps "
            f"the one it began under (one approval, any reviewer); effects for {ws.STALE_CASE_ID}: {earlier_effects}"
        )
        op = self._start()
        first = self.vote(op, FIRST_LEAD)
        first_effects = self.stack.effects(ws.QUORUM_CASE_ID)
        self.say.line(f"-> {self.said(first)}; effects for {ws.QUORUM_CASE_ID}: {first_effects}")
        outsider = self.vote(op, ws.REVIEWER)
        votes = self.stack.count("SELECT count(*) FROM votes WHERE operation_id = :op", op=op)
        outsider_effects = self.stack.effects(ws.QUORUM_CASE_ID)
        self.say.line(
            f"-> {self.said(outsider)}: {ws.REVIEWER} holds no group of the stage; votes recorded: {votes}, "
            f"effects for {ws.QUORUM_CASE_ID}: {outsider_effects}"
        )
        second = self.vote(op, SECOND_LEAD)
        effects = self.stack.effects(ws.QUORUM_CASE_ID)
        self.say.line(f"-> {self.said(second)}; effects for {ws.QUORUM_CASE_ID}: {effects}")
        return QuorumSeen(
            earlier_rule_kept=earlier.exit_code == 0 and outcome == COMMITTED and earlier_effects == 1,
            not_eligible_refused=(
                outsider.code == grpc.StatusCode.PERMISSION_DENIED.name
                and outsider.reason == reasons.NOT_ELIGIBLE_TO_DECIDE
                and votes == 1
                and outsider_effects == 0
            ),
            quorum_two_of_three=(
                first.outcome == AWAITING
                and first_effects == 0
                and second.outcome == COMMITTED
                and second.reviewer == SECOND_LEAD
                and effects == 1
            ),
        )

    def _put_in_force(self) -> None:
        """Write the rule over the file the orchestrator was started with, check it, and SIGHUP the orchestrator."""
        assert self.stack.orchestrator is not None
        self.ws.review_rules.write_text(ws.QUORUM_RULE, encoding="utf-8")
        self.say.line(
            f"{ws.REVIEW_RULES} now says: {ws.ACTION} needs 2 approvals from group {ws.LEADS_GROUP} "
            f"({', '.join(ws.LEADS)})"
        )
        self.say.line(f"$ decisionflow rules check {ws.REVIEW_RULES}")
        checked = self.stack.children.run("decisionflow_cli", ["rules", "check", str(self.ws.review_rules)])
        stages = [line.strip() for line in checked.stdout.splitlines() if line.startswith("  ")]
        if checked.exit_code != 0 or not stages:
            raise DemoError(f"decisionflow rules check failed (exit {checked.exit_code}): {checked.message}")
        self.say.line(f"-> exit 0: {ws.ACTION}: {'; '.join(stages)}")
        orchestrator = self.stack.orchestrator
        self.say.line(f"$ kill -HUP {orchestrator.pid}   ({orchestrator.name})")
        reloaded = self.stack.reload_rules().replace(str(self.ws.review_rules), ws.REVIEW_RULES)
        self.say.line(f"-> {orchestrator.name} logs: {reloaded}")

    def _start(self) -> str:
        started = self.stack.review(
            "start", [str(self.ws.input(f"{ws.QUORUM_CASE_ID}.json"))], ws.AUTHOR, f"{ws.QUORUM_CASE_ID}.json"
        )
        op = str(started.document.get("operation_id", ""))
        if started.exit_code != 0 or not op:
            raise DemoError(f"decisionflow start failed (exit {started.exit_code}): {started.message}")
        self.say.line(f"-> {started.document.get('state')}, operation {short(op)}, under the rule now in force")
        return op

    def vote(self, op: str, principal: str) -> Answer:
        """Send one raw ApproveRequest for op as principal on a fresh channel and return what it answered."""
        assert self.stack.orchestrator is not None
        groups = ws.GROUPS.get(principal, ())
        held = f"group {', '.join(groups)}" if groups else "no group"
        self.say.line(f"raw ApproveRequest for {short(op)} as {principal} ({held})")
        channel = insecure_channel(self.stack.orchestrator.target)
        try:
            stub = review_pb2_grpc.ReviewServiceStub(channel)
            request = review_pb2.ApproveRequest(operation_id=op, decision=common_pb2.DECISION_APPROVE)
            try:
                answer = stub.Approve(request, timeout=30, metadata=bearer_metadata(self.ws.token(principal)))
            except grpc.RpcError as failure:
                error = map_rpc_error(failure)
                return Answer(
                    code=error.code.name,
                    reason=error.reason,
                    vote_refusal=error.metadata.get(reasons.VOTE_REFUSAL, ""),
                )
        finally:
            channel.close()
        outcome = common_pb2.Outcome.Name(answer.outcome).removeprefix("OUTCOME_")
        progress = answer.operation.progress if answer.operation.HasField("progress") else None
        return Answer(outcome=outcome, progress=progress, reviewer=answer.operation.reviewer)

    def said(self, answer: Answer) -> str:
        if answer.code != "OK":
            return f"{answer.code} ({answer.reason}, {answer.vote_refusal or 'no vote refusal named'})"
        if answer.outcome == AWAITING and answer.progress is not None:
            given, needed = list(answer.progress.approvals_given), answer.progress.approvals_needed
            return (
                f"outcome {AWAITING}: waiting for {needed - len(given)} more "
                f"({len(given)} of {needed} approvals, by {', '.join(given)})"
            )
        return f"outcome {answer.outcome}, decided by {answer.reviewer}"

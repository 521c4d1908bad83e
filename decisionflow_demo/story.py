"""The eight steps of docs/demo.md, each driving real processes and recording what it observed.

Between steps only ids and file paths are kept here; every service state lives in the databases
of processes that are stopped and started again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import grpc

from decisionflow import reasons
from decisionflow.channels import insecure_channel
from decisionflow.client import Decision, map_rpc_error
from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow_demo import workspace as ws
from decisionflow_demo.audit_trail import AuditTrail
from decisionflow_demo.children import DemoError, Finished, Service
from decisionflow_demo.control import NaiveAttempt, run_naive_client
from decisionflow_demo.quorum import Quorum
from decisionflow_demo.stack import DemoStack, short
from decisionflow_demo.waiting import Waiting
from decisionflow_server.runtime.auth import bearer_metadata

LOSE_EVERY_REPLY = "receiver.commit_then_lose_reply=raise"
LOSE_FIRST_REPLY = "receiver.commit_then_lose_reply=raise@1"
REEMITTED = "review request re-emitted from checkpoint"
APPROVE_RPC = "/decisionflow.v1.ReviewService/Approve"
EXIT_UNKNOWN, EXIT_REFUSED = 42, 3


@dataclass
class Observations:
    """What the demo saw; ``failed()`` names every check that did not come out as docs/demo.md says."""

    operation_id: str = ""
    checkpoint_id: str = ""
    checkpoints: int = 0
    reemitted_from_checkpoint: bool = False
    unknown_before_reconcile: bool = False
    committed_after_reconcile: bool = False
    effects_after_reconcile: int = -1
    replay: bool = False
    effects_for_case: int = -1
    conflict_refused: bool = False
    stale_refused: bool = False
    omitted_refused: bool = False
    control_effects: int = -1
    control_attempts: list[NaiveAttempt] = field(default_factory=list)
    receipt_id: str = ""  # the receipt the reconciler's settlement stored
    audit_verified: bool = False
    earlier_rule_kept: bool = False
    not_eligible_refused: bool = False
    quorum_two_of_three: bool = False
    waiter_kept_waiting: bool = False
    waiter_saw_outcome: bool = False
    jetstream: str = ""  # "ran", or why the relay and its consumer were left out
    consumer_saw_outcome: bool = False

    def failed(self) -> list[str]:
        """Names of the checks that did not hold."""
        held = {
            "checkpoints": self.checkpoints > 0,
            "reemitted_from_checkpoint": self.reemitted_from_checkpoint,
            "unknown_before_reconcile": self.unknown_before_reconcile,
            "committed_after_reconcile": self.committed_after_reconcile,
            "effects_after_reconcile": self.effects_after_reconcile == 1,
            "replay": self.replay,
            "effects_for_case": self.effects_for_case == 1,
            "conflict_refused": self.conflict_refused,
            "stale_refused": self.stale_refused,
            "omitted_refused": self.omitted_refused,
            "control_effects": self.control_effects == 2,
            "audit_verified": self.audit_verified,
            "earlier_rule_kept": self.earlier_rule_kept,
            "not_eligible_refused": self.not_eligible_refused,
            "quorum_two_of_three": self.quorum_two_of_three,
            "waiter_kept_waiting": self.waiter_kept_waiting,
            "waiter_saw_outcome": self.waiter_saw_outcome,
        }
        if self.jetstream == "ran":
            held["consumer_saw_outcome"] = self.consumer_saw_outcome
        return [name for name, ok in held.items() if not ok]


class Story:
    """Runs the eight steps on a stack and records what each observed in ``seen``."""

    def __init__(self, stack: DemoStack) -> None:
        self.stack = stack
        self.ws = stack.ws
        self.say = stack.say
        self.seen = Observations()
        self.edited_operation_id = ""  # the stale-tab case's current proposal, left pending

    def step1(self) -> None:
        """Start the receiver and orchestrator A; begin case T-1042."""
        self.say.step(1, f"Start the receiver and orchestrator A; begin case {ws.CASE_ID}")
        self.stack.ready(self.stack.launch_receiver(), self.stack.launch_orchestrator("orchestrator A"))
        self.stack.check_fresh()
        started = self.stack.review(
            "start", [str(self.ws.input(f"{ws.CASE_ID}.json"))], ws.AUTHOR, f"{ws.CASE_ID}.json"
        )
        document = started.document
        if started.exit_code != 0 or not document.get("operation_id"):
            raise DemoError(f"decisionflow start failed (exit {started.exit_code}): {started.message}")
        self.seen.operation_id = document["operation_id"]
        self.seen.checkpoint_id = document["pending_review"]["checkpoint_id"]
        self.seen.checkpoints = self.stack.count(
            "SELECT count(*) FROM checkpoints WHERE operation_id = :op", op=self.seen.operation_id
        )
        self.say.line(f"-> {document['state']}, operation {self.seen.operation_id}")
        self.say.line(
            f"-> pending review at checkpoint {self.seen.checkpoint_id}; "
            f"{self.seen.checkpoints} checkpoint{'' if self.seen.checkpoints == 1 else 's'} written to the "
            "orchestrator database"
        )

    def step2(self) -> None:
        """Replace the orchestrator, lose every reply after commit, approve: outcome Unknown."""
        self.say.step(2, "Restart: orchestrator A stops, B starts; the receiver loses every reply after commit")
        assert self.stack.orchestrator is not None
        stopped = self.stack.orchestrator
        status = self.stack.children.stop(stopped)
        self.say.line(f"orchestrator A pid {stopped.pid} stopped (SIGTERM, exit {status})")
        orchestrator_b = self.stack.launch_orchestrator("orchestrator B")
        self.stack.ready(orchestrator_b, self.stack.launch_receiver(LOSE_EVERY_REPLY))
        op = self.seen.operation_id
        approved = self.stack.review("approve", [op], ws.REVIEWER, short(op))
        resumed_from = self._resumed_from(orchestrator_b, op)
        if resumed_from:
            self.say.line(f"-> orchestrator B, the Approve's access line: {REEMITTED} {resumed_from}")
        self.seen.reemitted_from_checkpoint = resumed_from == self.seen.checkpoint_id
        outcome = approved.document.get("outcome")
        self.say.line(
            f"-> outcome {outcome}, exit {approved.exit_code}: the decision is recorded, the effect is not confirmed"
        )
        status_run = self.stack.review("status", [op], ws.REVIEWER, short(op))
        state = status_run.document.get("state")
        self.say.line(f"-> {state}")
        self.seen.unknown_before_reconcile = (
            approved.exit_code == EXIT_UNKNOWN and outcome == "UNKNOWN" and state == "UNKNOWN"
        )

    def _resumed_from(self, orchestrator: Service, operation_id: str) -> str:
        """The checkpoint the Approve of operation_id resumed from, as its access line names it."""
        for line in orchestrator.log().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("rpc") == APPROVE_RPC and entry.get("operation_id") == operation_id:
                return str(entry.get("checkpoint_id", ""))
        return ""

    def step3(self) -> None:
        """Heal the receiver, run one reconciler pass: lookup, COMMITTED, one effect."""
        self.say.step(3, "The network heals: the receiver restarts without the fault; one reconciler pass")
        self.stack.ready(self.stack.launch_receiver())
        assert self.stack.orchestrator is not None and self.stack.receiver is not None
        args = [
            "--once",
            "--json",
            "--orchestrator-target",
            self.stack.orchestrator.target,
            "--receiver-target",
            self.stack.receiver.target,
            "--orchestrator-token-file",
            str(self.ws.token_file(ws.OPERATOR)),
            "--receiver-token-file",
            str(self.ws.token_file(ws.RECONCILER_READER)),
        ]
        self.say.line(
            f"$ decisionflow-reconciler --once --json   (as {ws.OPERATOR} at the orchestrator, "
            f"{ws.RECONCILER_READER} at the receiver)"
        )
        passed = self.stack.children.run("reconciler.main", args)
        summary = passed.document
        self.say.line(
            f"-> examined {summary.get('examined')}, settled {summary.get('settled')} by lookup, "
            f"re-driven {summary.get('redriven')}, still unknown {summary.get('still_unknown')}; "
            f"exit {passed.exit_code}"
        )
        op = self.seen.operation_id
        status_run = self.stack.review("status", [op], ws.REVIEWER, short(op))
        state = status_run.document.get("state")
        receipt = (status_run.document.get("receipt") or {}).get("receipt_id")
        self.seen.receipt_id = str(receipt or "")
        self.say.line(f"-> {state}, receipt {receipt}")
        self.seen.committed_after_reconcile = passed.exit_code == 0 and state == "COMMITTED"
        self.seen.effects_after_reconcile = self.stack.effects(ws.CASE_ID)
        self.say.line(f"effects for case {ws.CASE_ID} at the receiver: {self.seen.effects_after_reconcile}")

    def step4(self) -> None:
        """Approve again (replay), decline (conflict), a stale tab, an omitted decision."""
        self.say.step(4, "Retries and refusals: approve again, decline, a stale tab, an omitted decision")
        op = self.seen.operation_id
        again = self.stack.review("approve", [op], ws.REVIEWER, short(op))
        self.seen.replay = again.exit_code == 0 and again.document.get("replay") is True
        self.seen.effects_for_case = self.stack.effects(ws.CASE_ID)
        self.say.line(
            f"-> outcome {again.document.get('outcome')}, replay {str(again.document.get('replay')).lower()}, "
            f"exit {again.exit_code}; effects for {ws.CASE_ID}: {self.seen.effects_for_case}"
        )
        declined = self.stack.review("decline", [op], ws.REVIEWER, short(op))
        self.seen.conflict_refused = declined.exit_code == EXIT_REFUSED and self._reason(declined) == (
            reasons.DECISION_CONFLICT
        )
        recorded = Decision.parse(
            str((declined.document.get("error") or {}).get("metadata", {}).get(reasons.RECORDED_DECISION, ""))
        )
        self.say.line(
            f"-> refused, exit {declined.exit_code}: {self._reason(declined)} (recorded decision: {recorded.value})"
        )
        self._stale_tab()
        self._omitted_decision()

    def _reason(self, finished: Finished) -> str:
        return str((finished.document.get("error") or {}).get("reason", ""))

    def _stale_tab(self) -> None:
        first = self.stack.review("start", [str(self.ws.input(f"{ws.STALE_CASE_ID}.json"))], ws.AUTHOR, "T-1043.json")
        v2 = str(first.document.get("operation_id", ""))
        self.say.line(f"-> {first.document.get('state')}, operation {short(v2)} (HOLD-7 version 2)")
        edit_file = str(self.ws.input(f"{ws.STALE_CASE_ID}-edit.json"))
        edited = self.stack.review("edit", [v2, edit_file], ws.AUTHOR, f"{short(v2)} T-1043-edit.json")
        v4 = str(edited.document.get("operation_id", ""))
        self.say.line(f"-> operation {short(v4)} (HOLD-7 version 4, same quotation, same visible text) is now current")
        stale = self.stack.review("approve", [v2], ws.REVIEWER, short(v2), ", from the old browser tab")
        current = (stale.document.get("error") or {}).get("metadata", {}).get(reasons.CURRENT_OPERATION_ID)
        self.seen.stale_refused = (
            bool(v2 and v4 and v2 != v4)
            and stale.exit_code == EXIT_REFUSED
            and self._reason(stale) == reasons.STALE_PROPOSAL
            and current == v4
        )
        self.say.line(f"-> refused, exit {stale.exit_code}: {self._reason(stale)} (current: {short(str(current))})")
        self.edited_operation_id = v4

    def _omitted_decision(self) -> None:
        assert self.stack.orchestrator is not None
        op = self.edited_operation_id
        self.say.line(f"raw ApproveRequest for {short(op)} with decision DECISION_UNSPECIFIED (fresh channel)")
        channel = insecure_channel(self.stack.orchestrator.target)
        try:
            stub = review_pb2_grpc.ReviewServiceStub(channel)
            request = review_pb2.ApproveRequest(operation_id=op, decision=common_pb2.DECISION_UNSPECIFIED)
            try:
                stub.Approve(request, timeout=10, metadata=bearer_metadata(self.ws.token(ws.REVIEWER)))
                code, reason = "OK", ""
            except grpc.RpcError as failure:
                error = map_rpc_error(failure)
                code, reason = error.code.name, error.reason
            state = self.stack.review_client(channel, ws.REVIEWER).get_operation(op).state.value
        finally:
            channel.close()
        self.seen.omitted_refused = (
            code == "INVALID_ARGUMENT" and reason == reasons.DECISION_REQUIRED and state == "PENDING_REVIEW"
        )
        self.say.line(f"-> {code} ({reason}); the operation is still {state}: an omitted decision is not consent")

    def step5(self) -> None:
        """The control experiment: a fresh random key per attempt writes the effect twice."""
        self.say.step(5, "Control: the same lost reply, retried by a naive client with a fresh random key per attempt")
        self.stack.ready(self.stack.launch_receiver(LOSE_FIRST_REPLY))
        assert self.stack.receiver is not None
        self.say.line(f"naive client: Apply for case {ws.CONTROL_CASE_ID}, retrying with tenacity, new key each try")

        def report(attempt: NaiveAttempt) -> None:
            self.say.line(f"-> Apply {short(attempt.operation_id)}: {attempt.result}")

        token = bearer_metadata(self.ws.token(ws.NAIVE_CLIENT))
        self.seen.control_attempts = run_naive_client(
            self.stack.receiver.target, token, ws.CONTROL_CASE_ID, ws.ACTION, ws.BODY, on_attempt=report
        )
        self.seen.control_effects = self.stack.effects(ws.CONTROL_CASE_ID)
        self.seen.effects_for_case = self.stack.effects(ws.CASE_ID)
        self.say.line(
            f"effects for {ws.CONTROL_CASE_ID}: {self.seen.control_effects} (one approval, two records); "
            f"effects for {ws.CASE_ID}: {self.seen.effects_for_case}"
        )

    def step6(self) -> None:
        """Sign a checkpoint of the audit log, export T-1042's leaves as an auditor, verify them offline."""
        self.say.step(6, f"The audit log: {ws.CASE_ID}'s history, checked offline with nothing but its verifier key")
        self.seen.audit_verified = AuditTrail(self.stack).shows(self.seen.operation_id, self.seen.receipt_id)

    def step7(self) -> None:
        """Put a rule of two leads' approvals in force (SIGHUP): T-1043 keeps its rule, T-1044 waits for two."""
        self.say.step(7, f"Review rules: an operator requires 2 approvals from {ws.LEADS_GROUP} and reloads (SIGHUP)")
        seen = Quorum(self.stack).shows(self.edited_operation_id)
        self.seen.earlier_rule_kept = seen.earlier_rule_kept
        self.seen.not_eligible_refused = seen.not_eligible_refused
        self.seen.quorum_two_of_three = seen.quorum_two_of_three

    def step8(self) -> None:
        """A service waits for T-1045's outcome on the event feed while two leads approve it."""
        self.say.step(8, f"Services that wait: {ws.AUTHOR}'s service waits for {ws.WAITING_CASE_ID}'s outcome")
        seen = Waiting(self.stack).shows()
        self.seen.waiter_kept_waiting = seen.waiter_kept_waiting
        self.seen.waiter_saw_outcome = seen.waiter_saw_outcome
        self.seen.jetstream = seen.jetstream
        self.seen.consumer_saw_outcome = seen.consumer_saw_outcome

"""The rolling upgrade into review rules, with real processes: the previous release (this repository's
packages as they were just before orchestrator revision 0008, taken from its git history) starts reviews
on its schema (revision 0007); this release's migration Job brings the database to head, and this
release's orchestrator serves beside the previous release's on the same database. The previous release
keeps serving (a replica of it started after the Job too), and a review started before the upgrade keeps
the default rule: one approval, on either release, completes it, with its proposal's rule digest empty and
no progress. Once every replica runs this release, a rules file asking two approvals of a group applies to
new reviews only: a pre-upgrade review is still completed by one approval of a reviewer outside the group.
Each review writes its effect once.

Without the previous release in the history (a shallow clone, a source archive) the test skips with the
reason."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
import pytest

from decisionflow.bearer import bearer_metadata
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow.vocabulary import Role
from decisionflow_demo import releases
from decisionflow_demo.launch import ORCHESTRATOR_MODULE, RECEIVER_MODULE, orchestrator_args, receiver_args
from decisionflow_server.foundation.processes import ServiceProcess
from decisionflow_server.runtime.auth import issue_token
from tests.migrations.test_rolling_upgrade import THIS_ORCHESTRATOR, migrate, serving
from tests.support.stack import approve, count, start_request

PREVIOUS_HEAD = "0007"
COMPATIBLE_FROM = "0006"  # revisions 0008 and 0009 are Expand(oldest="0006")
RULES = """\
version = 1

[[actions.record_support_review.stages]]
name = "leads"
groups = ["support-leads"]
approvals = 2
"""
PEOPLE = {
    "ava": ([Role.AUTHOR], []),
    "rita": ([Role.REVIEWER], []),
    "lee": ([Role.REVIEWER], ["support-leads"]),
    "lin": ([Role.REVIEWER], ["support-leads"]),
}


def previous_release(destination: Path) -> Path:
    """The release before review rules, extracted into destination; skips, with the reason, when the history
    does not hold it."""
    try:
        return releases.previous_release(destination)
    except releases.ReleaseNotInHistory as missing:
        pytest.skip(str(missing))


class Desk:
    """A ReviewService stub per orchestrator, each call made as one of PEOPLE."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = tokens
        self._channels: dict[str, grpc.Channel] = {}

    def stub(self, orchestrator: ServiceProcess) -> review_pb2_grpc.ReviewServiceStub:
        if orchestrator.target not in self._channels:
            self._channels[orchestrator.target] = grpc.insecure_channel(orchestrator.target)
        return review_pb2_grpc.ReviewServiceStub(self._channels[orchestrator.target])

    def start(self, orchestrator: ServiceProcess, case_id: str) -> str:
        answer = self.stub(orchestrator).StartReview(
            start_request(case_id=case_id), timeout=30, metadata=bearer_metadata(self.tokens["ava"])
        )
        return str(answer.proposal.operation_id)

    def approve(self, orchestrator: ServiceProcess, who: str, operation_id: str) -> review_pb2.ApproveResponse:
        answer: review_pb2.ApproveResponse = self.stub(orchestrator).Approve(
            approve(operation_id), timeout=30, metadata=bearer_metadata(self.tokens[who])
        )
        return answer

    def get(self, orchestrator: ServiceProcess, operation_id: str) -> review_pb2.Operation:
        answer: review_pb2.GetOperationResponse = self.stub(orchestrator).GetOperation(
            review_pb2.GetOperationRequest(operation_id=operation_id),
            timeout=30,
            metadata=bearer_metadata(self.tokens["rita"]),
        )
        return answer.operation

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()


@contextmanager
def desk(directory: Path) -> Iterator[tuple[Desk, Path]]:
    """A credentials file in directory with a token per person, and the desk that calls with them."""
    credentials = directory / "credentials.json"
    made = Desk({name: issue_token(credentials, name, roles, groups) for name, (roles, groups) in PEOPLE.items()})
    try:
        yield made, credentials
    finally:
        made.close()


def committed_by_one(answer: review_pb2.ApproveResponse, who: str) -> bool:
    """The approval committed the review by itself, as the default rule has it."""
    return (
        answer.outcome == common_pb2.OUTCOME_COMMITTED
        and not answer.replay
        and answer.operation.reviewer == who
        and not answer.operation.HasField("progress")
    )


@pytest.mark.slow
def test_reviews_started_before_the_upgrade_keep_the_default_rule_on_either_release(
    database_url: str, tmp_path: Path
) -> None:
    orchestrator_url = database_url
    receiver_url = database_url if database_url.startswith("postgresql") else f"sqlite:///{tmp_path / 'receiver.db'}"
    previous = previous_release(tmp_path / "previous")
    logs = tmp_path / "logs"
    logs.mkdir()
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(RULES, encoding="utf-8")

    def effects(operation_id: str) -> int:
        return count(receiver_url, f"SELECT count(*) FROM effects WHERE operation_id = '{operation_id}'")

    def default_rule(operation_id: str) -> bool:
        where = f"operation_id = '{operation_id}' AND rule_digest IS NULL"
        return count(orchestrator_url, f"SELECT count(*) FROM proposals WHERE {where}") == 1

    # The previous release, on its own schema.
    assert migrate(ORCHESTRATOR_MODULE, orchestrator_url, cwd=previous)[:2] == (
        0,
        {"command": "migrate", "show": False, "before": None, "after": PREVIOUS_HEAD},
    )
    assert migrate(RECEIVER_MODULE, receiver_url, cwd=previous)[0] == 0
    with desk(tmp_path) as (people, credentials), ExitStack() as previous_replicas:
        auth = ["--credentials-file", str(credentials)]
        old_receiver = previous_replicas.enter_context(
            serving(RECEIVER_MODULE, receiver_args(receiver_url), logs, "previous-receiver", previous)
        )
        previous_args = orchestrator_args(orchestrator_url, old_receiver.target, extra=auth)
        old = previous_replicas.enter_context(
            serving(ORCHESTRATOR_MODULE, previous_args, logs, "previous-orchestrator", previous)
        )
        before = [people.start(old, f"T-30{n}") for n in range(1, 4)]

        # This release's migration Job while the previous release serves; a replica of the previous release
        # that starts after it runs on the new schema; then this release beside them.
        assert migrate(ORCHESTRATOR_MODULE, orchestrator_url)[:2] == (
            0,
            {"command": "migrate", "show": False, "before": PREVIOUS_HEAD, "after": THIS_ORCHESTRATOR},
        )
        restarted = previous_replicas.enter_context(
            serving(ORCHESTRATOR_MODULE, previous_args, logs, "previous-orchestrator-2", previous)
        )
        assert (
            f"found revision {THIS_ORCHESTRATOR}, newer than this release's head {PREVIOUS_HEAD}, compatible from "
            f"{COMPATIBLE_FROM}: running without migrating"
        ) in restarted.log()
        with serving(RECEIVER_MODULE, receiver_args(receiver_url), logs, "receiver") as receiver:
            this_release = orchestrator_args(orchestrator_url, receiver.target, extra=auth)
            with serving(ORCHESTRATOR_MODULE, this_release, logs, "orchestrator") as new:
                # The previous release keeps serving: it starts, approves and reads a review.
                during = people.start(restarted, "T-3101")
                assert committed_by_one(people.approve(old, "rita", during), "rita")
                assert people.get(restarted, during).state == common_pb2.OPERATION_STATE_COMMITTED
                # A review started before the upgrade: one approval completes it, on this release or the previous.
                assert committed_by_one(people.approve(new, "rita", before[0]), "rita")
                assert committed_by_one(people.approve(restarted, "rita", before[1]), "rita")
                assert [people.get(new, operation_id).HasField("progress") for operation_id in before] == [False] * 3
                assert people.get(new, before[2]).state == common_pb2.OPERATION_STATE_PENDING_REVIEW

            # Every replica on this release, with a rules file asking two approvals of support-leads.
            previous_replicas.close()
            ruled = [*this_release, "--review-rules-file", str(rules_file)]
            with serving(ORCHESTRATOR_MODULE, ruled, logs, "orchestrator-with-rules") as new:
                # The last review started before the upgrade: rita, in no group, completes it alone.
                assert committed_by_one(people.approve(new, "rita", before[2]), "rita")
                assert not people.get(new, before[2]).HasField("progress")

                # A review started now follows the rule: rita's vote does not count, lee's is one of two.
                after = people.start(new, "T-3201")
                with pytest.raises(grpc.RpcError) as refused:
                    people.approve(new, "rita", after)
                reason, details, _ = error_info(refused.value)
                assert (reason, details.get("vote_refusal")) == ("NOT_ELIGIBLE_TO_DECIDE", "not_eligible")
                first = people.approve(new, "lee", after)
                assert first.outcome == common_pb2.OUTCOME_AWAITING_APPROVALS
                assert list(first.operation.progress.approvals_given) == ["lee"]
                assert first.operation.progress.approvals_needed == 2
                assert effects(after) == 0
                last = people.approve(new, "lin", after)
                assert last.outcome == common_pb2.OUTCOME_COMMITTED and last.operation.reviewer == "lin"

    assert [default_rule(operation_id) for operation_id in [*before, during, after]] == [True] * 4 + [False]
    assert [effects(operation_id) for operation_id in [*before, during, after]] == [1] * 5

"""The review-rules desk: a rules file, a credentials file whose people hold groups, and a stack serving both.

The rules the tests write: ``TWO_STAGES`` (two approvals of the support leads, then one of finance),
``timed_two_stages`` (the same with a deadline, a due time and an escalation group) and ``ESCALATING``
(one stage with a due time and an escalation group); ``with_deadline`` adds a deadline to one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decisionflow.bearer import bearer_metadata
from decisionflow.v1 import review_pb2, review_pb2_grpc
from decisionflow.vocabulary import Role
from decisionflow_server.runtime.auth import issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.stack import Stack, approve, open_stack, start_request

# Two of the support leads, then one of finance; no deadline, no due time.
TWO_STAGES = """\
version = 1

[[actions.record_support_review.stages]]
name = "leads"
groups = ["support-leads"]
approvals = 2

[[actions.record_support_review.stages]]
name = "finance"
groups = ["finance"]
"""


# One stage of the support leads, due in 4 h and then open to on-call-leads too; no deadline.
ESCALATING = """\
version = 1

[[actions.record_support_review.stages]]
name = "leads"
groups = ["support-leads"]
due = "4h"
escalate_to = ["on-call-leads"]
"""


def with_deadline(rules: str, deadline: str, action: str = "record_support_review") -> str:
    """rules (a file without a table of action's own) with action's deadline set (``"1h"``)."""
    return rules.replace("version = 1\n", f'version = 1\n\n[actions.{action}]\ndeadline = "{deadline}"\n', 1)


def timed_two_stages(action: str = "record_support_review") -> str:
    """TWO_STAGES for action, within 72 h, the leads' stage due in 4 h and then open to on-call-leads too."""
    return f"""\
version = 1

[actions.{action}]
deadline = "72h"

[[actions.{action}.stages]]
name = "leads"
groups = ["support-leads"]
approvals = 2
due = "4h"
escalate_to = ["on-call-leads"]

[[actions.{action}.stages]]
name = "finance"
groups = ["finance"]
"""


# Each person: their roles and the groups they hold.
People = Mapping[str, tuple[Sequence[Role], Sequence[str]]]


@dataclass(frozen=True)
class DeskFiles:
    """The files a desk's stack reads: its rules, its credentials, and a token per person."""

    rules: Path
    credentials: Path
    tokens: dict[str, str]


def write_rules(directory: Path, rules: str = TWO_STAGES) -> Path:
    """Write rules to directory/rules.toml; its path."""
    (path := directory / "rules.toml").write_text(rules, encoding="utf-8")
    return path


def write_desk_files(directory: Path, people: People, rules: str = TWO_STAGES) -> DeskFiles:
    """Write rules.toml and a credentials file in directory with a token per person (roles and groups)."""
    credentials = directory / "credentials.json"
    tokens = {name: issue_token(credentials, name, roles, groups) for name, (roles, groups) in people.items()}
    return DeskFiles(write_rules(directory, rules), credentials, tokens)


class Desk:
    """A stack serving the rules, with authentication on, and the ReviewService as each person calls it."""

    def __init__(self, stack: Stack, files: DeskFiles) -> None:
        self.stack = stack
        self.files = files
        self.tokens = files.tokens
        self.stub: review_pb2_grpc.ReviewServiceStub = stack.review()

    def call(self, who: str, method: str, request: object) -> Any:
        """Call method of the ReviewService as who; its answer."""
        return getattr(self.stub, method)(request, timeout=30, metadata=bearer_metadata(self.tokens[who]))

    def start(self, case_id: str, who: str = "ava") -> str:
        """Start a review of case_id as who; its operation id."""
        return str(self.call(who, "StartReview", start_request(case_id)).proposal.operation_id)

    def approve(self, who: str, operation_id: str) -> review_pb2.ApproveResponse:
        """Approve operation_id as who."""
        answer: review_pb2.ApproveResponse = self.call(who, "Approve", approve(operation_id))
        return answer


@contextmanager
def open_desk(directory: Path, people: People, rules: str = TWO_STAGES, **orchestrator: Any) -> Iterator[Desk]:
    """A desk in directory: its files written, its stack (open_stack's arguments) started, and closed on leaving."""
    files = write_desk_files(directory, people, rules)
    stack = open_stack(
        directory,
        security=ServerSecurity(credentials_file=files.credentials),
        review_rules_file=files.rules,
        **orchestrator,
    )
    try:
        yield Desk(stack, files)
    finally:
        stack.close()

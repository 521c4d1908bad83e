"""Who may use what: each page and action of the console stands for the orchestrator call it makes,
and the orchestrator's policy (``decisionflow_server.runtime.auth.RPC_ROLES``) says which roles may
make that call. The console decides nothing with this: it leaves out what a person would be refused,
answers a page's address with 403 before a form is filled in vain, and lands each person on their
role's page. Every call is still checked by the orchestrator.

    use            the call its page or action makes      roles the policy admits
    INBOX          ListPendingReviews                     reviewer, author, operator
    READ_PROPOSAL  GetProposal                            reviewer, author, operator
    DECIDE         Approve (approve or decline)           reviewer
    START          StartReview                            author
    EDIT           EditProposal                           author
    DESK           ListOperations                         operator
    REDRIVE        RedriveOperation                       operator
    SETTLE         SettleOperation                        operator
    READ_LOG       GetInclusionProof                      auditor, operator
    RELAY          none: reads the relay's own metrics    operator, as DESK's ListOperations

The relay's page calls no orchestrator, so no call of its own would refuse a person: it is shown to
whom the policy admits to the operator desk, and only once the orchestrator has said their roles
(``access_pages.AccessPages.guarded``).
"""

from __future__ import annotations

from dataclasses import dataclass

from decisionflow.client import Role
from decisionflow_server.runtime.auth import RPC_ROLES

_REVIEW = "/decisionflow.v1.ReviewService/"
_OPERATIONS = "/decisionflow.v1.OperationsService/"
_AUDIT = "/decisionflow.v1.AuditService/"


@dataclass(frozen=True, slots=True)
class Use:
    """A use of the console: what doing it is called, and the orchestrator call its page or action makes."""

    doing: str
    rpc: str

    def __post_init__(self) -> None:
        # A use naming a call the policy does not know fails at import, not on a page.
        if self.rpc not in RPC_ROLES:
            raise ValueError(f"the orchestrator's policy names no call {self.rpc}")

    @property
    def roles(self) -> frozenset[Role]:
        """The roles the orchestrator's policy admits to the call."""
        return RPC_ROLES[self.rpc]

    @property
    def role(self) -> str:
        """Those roles in words ("operator", "auditor or operator")."""
        names = sorted(role.value for role in self.roles)
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]

    def admits(self, roles: frozenset[Role] | None) -> bool:
        """Whether one of roles may make the call (never while the roles are unknown)."""
        return roles is not None and not roles.isdisjoint(self.roles)


INBOX = Use("read the inbox", _REVIEW + "ListPendingReviews")
READ_PROPOSAL = Use("read this proposal", _REVIEW + "GetProposal")
DECIDE = Use("decide proposals", _REVIEW + "Approve")
START = Use("start a review", _REVIEW + "StartReview")
EDIT = Use("edit proposals", _REVIEW + "EditProposal")
DESK = Use("work at the operator desk", _OPERATIONS + "ListOperations")
REDRIVE = Use("re-drive operations", _OPERATIONS + "RedriveOperation")
SETTLE = Use("settle operations", _OPERATIONS + "SettleOperation")
READ_LOG = Use("read the audit log", _AUDIT + "GetInclusionProof")
# The relay page is part of the operator's desk: the desk's call stands for it (see the module's docstring).
RELAY = Use("see the relay's position", _OPERATIONS + "ListOperations")

# Where a person lands after signing in: the page of the first use their roles admit. Each use here
# is one role's own (only a reviewer decides, only an operator lists operations, only an author starts
# a case; an auditor reads the log), so a person with several roles lands on the first of them.
LANDINGS: tuple[tuple[Use, str], ...] = (
    (DECIDE, "/inbox"),
    (DESK, "/operations"),
    (START, "/start"),
    (READ_LOG, "/audit"),
)


def landing(roles: frozenset[Role]) -> str | None:
    """Return the path of the page roles land on; None for roles that admit none of the console's pages."""
    return next((path for use, path in LANDINGS if use.admits(roles)), None)


@dataclass(frozen=True, slots=True)
class Offers:
    """What a page may offer the signed-in person: each flag is whether their roles admit that use."""

    read_proposal: bool = False
    decide: bool = False
    edit: bool = False
    operate: bool = False
    read_log: bool = False

    @classmethod
    def to(cls, roles: frozenset[Role] | None) -> Offers:
        """Return what roles may be offered; nothing while they are unknown."""
        return cls(
            read_proposal=READ_PROPOSAL.admits(roles),
            decide=DECIDE.admits(roles),
            edit=EDIT.admits(roles),
            operate=REDRIVE.admits(roles) and SETTLE.admits(roles),
            read_log=READ_LOG.admits(roles),
        )

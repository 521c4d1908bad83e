"""OrchestratorStore: each public method is one transaction, its read-back inside it.

Its methods come from the module of their concept, each beside the helpers it runs in its
transaction: ``_proposals`` (starting, editing and reading proposals), ``_inbox`` (the pending
reviews' listing and each author's share of it), ``_ledger`` (the decision ledger and the effect
record), ``_votes`` (the votes of reviews under a rule), ``_review_timer`` (escalations and expiries by
time), ``_reroute`` (moving pending reviews to the rule in force), ``_operations`` (reading, listing and
settling operations), ``_audit_tree`` (the sequencer's transaction) and ``_audit_reads`` (reading the
audit log, whose entries the others write with their events), all on ``_store_base`` (the transactions
and tables they share).
"""

from __future__ import annotations

from orchestrator.store._audit_reads import AuditReadMethods
from orchestrator.store._audit_tree import AuditTreeMethods
from orchestrator.store._events import EventReadMethods
from orchestrator.store._inbox import InboxMethods
from orchestrator.store._ledger import LedgerMethods
from orchestrator.store._operations import OperationMethods
from orchestrator.store._proposals import ProposalMethods
from orchestrator.store._reroute import RerouteMethods
from orchestrator.store._review_timer import ReviewTimerMethods
from orchestrator.store._reviewer_inbox import ReviewerInboxMethods
from orchestrator.store._votes import VoteMethods


class OrchestratorStore(
    ProposalMethods,
    InboxMethods,
    ReviewerInboxMethods,
    LedgerMethods,
    VoteMethods,
    ReviewTimerMethods,
    RerouteMethods,
    OperationMethods,
    AuditTreeMethods,
    AuditReadMethods,
    EventReadMethods,
):
    """Proposals, pending reviews, the decision ledger, operation states, checkpoints and the audit log
    (an ``orchestrator.audit_log.ports.AuditLogReader``)."""

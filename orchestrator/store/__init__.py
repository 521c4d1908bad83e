"""The orchestrator's database (SQLAlchemy Core). Each public method is one transaction with
its read-back inside it; helpers ending in ``_txn`` join the caller's. Rows leave as frozen
domain dataclasses.

Once-per-key rules are constraints: a proposal per operation id (primary key), a decision
per operation id (primary key), and the case's current proposal moves only by
compare-and-set. A duplicate key is told from any other constraint failure by reading the
winner in the same transaction.

Transactions (write turn, Unavailable) are ``decisionflow_server.storage.transactions``, shared with the
receiver. One module per concept, each holding its public methods (a class OrchestratorStore is made
of) beside the helpers they run in their transaction:

- ``_proposals``: starting and editing proposals, the case's current pointer, reading them back;
- ``_inbox``: the pending reviews' listing and each author's share of it;
- ``_ledger``: the decision ledger and the effect record (attempts, receipts, rejections);
- ``_votes``: the votes of reviews under a rule other than the default one, decided one at a time;
- ``_review_timer``: the escalations and expiries of reviews under a rule, by time;
- ``_operations``: reading, listing, tallying and settling operations;
- ``_audit_entries``: the audit log's entries, written with each event;
- ``_audit_tree``: sequencing the log and signing its checkpoints;
- ``_audit_reads``: leaves, proofs, checkpoints and the log's lag;
- ``_checkpoints``: the workflow checkpoints' table;
- ``_housekeeping``: the operator's pruning and expiry.

Beneath them: ``_statements`` (prebuilt statements), ``_takeover`` (the attempt that takes over an
ended holder's lease), ``_columns`` (the vocabulary as the columns spell it), ``_rows`` (row → domain),
``_store_base`` (the transactions and tables every part shares) and ``_migrations``. Above them:
``_store`` (OrchestratorStore, made of the parts' methods) and ``_async`` (its async facade).
"""

from __future__ import annotations

from decisionflow_server.storage.transactions import Transactions
from orchestrator.store._async import AsyncOrchestratorStore
from orchestrator.store._checkpoints import CheckpointTable
from orchestrator.store._housekeeping import SETTLED_STATES, Housekeeping
from orchestrator.store._ledger import AttemptInFlight, DecisionAlreadyRecorded
from orchestrator.store._migrations import MIGRATIONS, VERSION_TABLE, migrate
from orchestrator.store._reroute import RerouteOutcome, RerouteVisit, ReviewRerouted, target_digest
from orchestrator.store._review_timer import TimedAct, TimerVisit
from orchestrator.store._reviewer_inbox import EVERY_REVIEW, InboxKey, Reader, inbox_key, inbox_order
from orchestrator.store._store import OrchestratorStore
from orchestrator.store._votes import CastVote, VoteAlreadyCast

__all__ = [
    "EVERY_REVIEW",
    "MIGRATIONS",
    "SETTLED_STATES",
    "VERSION_TABLE",
    "AsyncOrchestratorStore",
    "AttemptInFlight",
    "CastVote",
    "CheckpointTable",
    "DecisionAlreadyRecorded",
    "Housekeeping",
    "InboxKey",
    "OrchestratorStore",
    "Reader",
    "RerouteOutcome",
    "RerouteVisit",
    "ReviewRerouted",
    "TimedAct",
    "TimerVisit",
    "Transactions",
    "VoteAlreadyCast",
    "inbox_key",
    "inbox_order",
    "migrate",
    "target_digest",
]

"""The reconciler: settles operations whose outcome is Unknown by asking the EffectReceiver.

It owns no database. Each pass lists UNKNOWN operations (any age) and APPROVED ones older
than the grace period from the orchestrator's OperationsService, looks them up with the
receiver's BatchLookup, records every lookup with BatchSettleOperations, and re-drives
(Apply again under the same operation id, through the orchestrator) those the rules in
``reconciler.domain`` allow. It never reruns the workflow and never guesses: only an APPLIED
lookup answer, with the receiver's receipt, moves an operation to COMMITTED.

Receiver down for the whole pass: every lookup fails, so nothing is settled and nothing is
re-driven; each examined operation stays as it was (UNKNOWN or APPROVED) with the failed
lookup and its error noted on the operation (SettleOperation with status unspecified). The
summary counts them as lookup failures and as still unknown, and the exit status is 1 if any
of them was decided longer ago than --alert-after-seconds, else 0 -- so an alert fires only
once the backlog is old, whatever the cause. After the first batch whose lookup failed through
all its retries, later batches of the same pass are tried once each, so a dead receiver does
not stretch the pass.

Several reconcilers at once are harmless: settlement only moves APPROVED/UNKNOWN to
COMMITTED (a second settlement changes nothing), Apply is idempotent per operation id, and a
re-drive refused because the operation was already closed is counted as settled elsewhere,
not as an error.

Modules: ``config`` (settings), ``domain`` (rules, summary), ``ports`` (the two services as
the pass sees them), ``service`` (one pass), ``lookahead`` (listing and lookups run one batch
ahead), ``metrics`` (Prometheus, --interval mode), ``main`` (the decisionflow-reconciler command).
"""

"""The orchestrator's audit log: every event that changes what a case means is one leaf, written in the
same transaction as the event; a sequencer gives leaves their indices and signs checkpoints off the
request path; the AuditService answers proofs (docs/audit-log.md).

Here stand the parts that run the log, above the store: the sequencer, the publication of checkpoints,
the AuditService and its servicer, the audit commands and their refusals. What the store needs of the
log (its leaves, records and signer) is one floor below it, in ``orchestrator.audit_log``."""

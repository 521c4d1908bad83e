"""The orchestrator's audit log: every event that changes what a case means is one leaf, written in the
same transaction as the event; a sequencer gives leaves their indices and signs checkpoints off the
request path; the AuditService answers proofs (docs/audit-log.md)."""

"""The audit log's own terms, below the store that keeps the log: the leaf each event writes
(``events``), what is read back from the log (``ports``: leaves, checkpoints, the reader's Protocol),
how far the sequencer has come (``progress``) and the checkpoint signer (``signing``).

The parts that run the log stand above the store, in ``orchestrator.audit``; these import neither."""

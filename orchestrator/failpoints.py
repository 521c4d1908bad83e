"""The orchestrator's named failpoints: places where a test or campaign can crash or fail it on purpose.

Enabled only by configuration (``--failpoints``); see ``decisionflow_server.runtime.failpoints`` for the mechanism.
"""

AFTER_DECISION = "orchestrator.after_decision"
AFTER_ATTEMPT = "orchestrator.after_attempt"
AFTER_RECEIVER_OK = "orchestrator.after_receiver_ok"
CHECKPOINT_SAVE = "orchestrator.checkpoint_save"
FAILPOINTS = (AFTER_DECISION, AFTER_ATTEMPT, AFTER_RECEIVER_OK, CHECKPOINT_SAVE)

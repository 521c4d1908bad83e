"""The receiver's named failpoints: places where a test or campaign can crash or fail it on purpose.

Both fire after an Apply's transaction has committed, for a new effect and for a replay alike
(``effect_receiver.service``). Enabled only by configuration (``--failpoints``); see
``decisionflow_server.runtime.failpoints`` for the mechanism.
"""

COMMIT_THEN_LOSE_REPLY = "receiver.commit_then_lose_reply"
COMMIT_THEN_EXIT = "receiver.commit_then_exit"
FAILPOINT_NAMES = (COMMIT_THEN_LOSE_REPLY, COMMIT_THEN_EXIT)

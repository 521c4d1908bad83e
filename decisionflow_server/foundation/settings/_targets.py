"""Where each server listens by default, and the settings that tell its clients where to call it: one
environment variable per server (``DECISIONFLOW_ORCHESTRATOR_TARGET``, ``DECISIONFLOW_RECEIVER_TARGET``)
whichever program reads it, defaulting to where that server listens by default."""

from __future__ import annotations

from decisionflow_server.foundation.settings._parsers import targets
from decisionflow_server.foundation.settings._setting import Setting

ORCHESTRATOR_ADDRESS = "127.0.0.1:50051"
RECEIVER_ADDRESS = "127.0.0.1:50061"


def orchestrator_target_setting(key: str = "orchestrator_target", *, note: str = "") -> Setting[str]:
    """The orchestrator's address as a client reads it (``DECISIONFLOW_ORCHESTRATOR_TARGET``), under the
    flag named by key; note follows the help's "host:port of the orchestrator"."""
    return Setting(
        key,
        "DECISIONFLOW_ORCHESTRATOR_TARGET",
        f"host:port of the orchestrator{note}, or of several replicas as comma-separated IP addresses",
        ORCHESTRATOR_ADDRESS,
        parse=targets,
    )


def receiver_target_setting(key: str = "receiver_target") -> Setting[str]:
    """The receiver's address as a client reads it (``DECISIONFLOW_RECEIVER_TARGET``), under the flag named by key."""
    return Setting(
        key,
        "DECISIONFLOW_RECEIVER_TARGET",
        "host:port of the EffectReceiver, or of several replicas as comma-separated IP addresses",
        RECEIVER_ADDRESS,
        parse=targets,
    )

"""Where each server listens by default, and the settings that tell its clients where to call it and
how: one environment variable per server and per meaning (``DECISIONFLOW_ORCHESTRATOR_TARGET``,
``DECISIONFLOW_RECEIVER_TARGET``; ``DECISIONFLOW_ORCHESTRATOR_CA_FILE``, ``DECISIONFLOW_RECEIVER_CA_FILE``
and their ``…_INSECURE_CLEARTEXT_TOKEN`` opt-ins) whichever program reads it, the target defaulting to
where that server listens by default."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from decisionflow_server.foundation.settings._parsers import targets
from decisionflow_server.foundation.settings._security import client_tls_settings
from decisionflow_server.foundation.settings._setting import Setting, SettingError

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


def _tls_settings(server: str, whom: str, key_prefix: str) -> tuple[Setting[Path], Setting[bool]]:
    return client_tls_settings(
        key_prefix,
        f"DECISIONFLOW_{server}_",
        f"CA bundle (PEM) of {whom}'s certificate: call it over TLS (unset: plaintext, loopback use)",
        whom,
    )


def orchestrator_tls_settings(key_prefix: str = "") -> tuple[Setting[Path], Setting[bool]]:
    """How a client reaches the orchestrator over TLS: the CA bundle of its certificate
    (``DECISIONFLOW_ORCHESTRATOR_CA_FILE``) and the cleartext opt-in
    (``DECISIONFLOW_ORCHESTRATOR_INSECURE_CLEARTEXT_TOKEN``), under flags prefixed by key_prefix."""
    return _tls_settings("ORCHESTRATOR", "the orchestrator", key_prefix)


def receiver_tls_settings(key_prefix: str = "") -> tuple[Setting[Path], Setting[bool]]:
    """How a client reaches the EffectReceiver over TLS: the CA bundle of its certificate
    (``DECISIONFLOW_RECEIVER_CA_FILE``) and the cleartext opt-in
    (``DECISIONFLOW_RECEIVER_INSECURE_CLEARTEXT_TOKEN``), under flags prefixed by key_prefix."""
    return _tls_settings("RECEIVER", "the receiver", key_prefix)


# Variables that named a CA or the cleartext opt-in without naming the server: the review commands' and
# ``receiver lookup``'s shared one meaning two servers. Still recognised, so that an environment giving
# one fails with a pointer instead of silently calling without TLS.
RETIRED_TLS_VARIABLES: Mapping[str, str] = {
    "DECISIONFLOW_CA_FILE": "DECISIONFLOW_ORCHESTRATOR_CA_FILE (the orchestrator's CA) or "
    "DECISIONFLOW_RECEIVER_CA_FILE (the receiver's)",
    "DECISIONFLOW_INSECURE_CLEARTEXT_TOKEN": "DECISIONFLOW_ORCHESTRATOR_INSECURE_CLEARTEXT_TOKEN or "
    "DECISIONFLOW_RECEIVER_INSECURE_CLEARTEXT_TOKEN",
    "DECISIONFLOW_CONSOLE_CA_FILE": "DECISIONFLOW_ORCHESTRATOR_CA_FILE",
    "DECISIONFLOW_CONSOLE_INSECURE_CLEARTEXT_TOKEN": "DECISIONFLOW_ORCHESTRATOR_INSECURE_CLEARTEXT_TOKEN",
}


def refuse_retired_tls_variables(environ: Mapping[str, str], names: Iterable[str]) -> None:
    """Raise SettingError when environ sets one of names (keys of RETIRED_TLS_VARIABLES), naming its successor."""
    for name in names:
        if environ.get(name):
            raise SettingError(f"{name} is retired: set {RETIRED_TLS_VARIABLES[name]}")

"""The settings every server (or every service) declares alike, named per service
(``DECISIONFLOW_<SERVICE>_...``): log level, gRPC core's log level, shutdown grace, worker processes, the port file,
schema migration at start and the metrics endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decisionflow import addresses
from decisionflow_server.foundation.settings._parsers import (
    grpc_log_level,
    integer,
    log_level,
    non_empty,
    path,
    port,
    seconds,
)
from decisionflow_server.foundation.settings._setting import Setting, SettingError


def log_level_setting(service: str, default: str) -> Setting[str]:
    """The ``--log-level`` setting of a service (``DECISIONFLOW_<SERVICE>_LOG_LEVEL``)."""
    return Setting(
        "log_level", f"DECISIONFLOW_{service}_LOG_LEVEL", "debug, info, warning or error", default, parse=log_level
    )


def grpc_log_level_setting(service: str) -> Setting[str]:
    """The ``--grpc-log-level`` setting of a service (``DECISIONFLOW_<SERVICE>_GRPC_LOG_LEVEL``): which of
    gRPC core's own lines its log keeps, as JSON lines (decisionflow_server.runtime.grpc_core_logs)."""
    return Setting(
        "grpc_log_level",
        f"DECISIONFLOW_{service}_GRPC_LOG_LEVEL",
        "gRPC core's own log lines kept in the log, as JSON lines on the logger grpc: off, error, warning or "
        "info (info adds, for example, a peer's GOAWAY; gRPC's GRPC_TRACE and GRPC_VERBOSITY=debug add its "
        "traces at info)",
        "error",
        parse=grpc_log_level,
    )


def shutdown_grace_setting(service: str) -> Setting[float]:
    """The ``--shutdown-grace-seconds`` setting of a server (``DECISIONFLOW_<SERVICE>_SHUTDOWN_GRACE_SECONDS``)."""
    return Setting(
        "shutdown_grace_seconds",
        f"DECISIONFLOW_{service}_SHUTDOWN_GRACE_SECONDS",
        "on SIGTERM/SIGINT, how long calls in flight may finish",
        "10",
        parse=seconds,
    )


MAX_WORKERS = 64


def workers_setting(service: str) -> Setting[int]:
    """The ``--workers`` setting of a server (``DECISIONFLOW_<SERVICE>_WORKERS``): how many processes serve
    its port (SO_REUSEPORT), each with its own server and database pool."""
    return Setting(
        "workers",
        f"DECISIONFLOW_{service}_WORKERS",
        "server processes sharing the port (SO_REUSEPORT), each with its own database pool; forked at start, "
        "before any gRPC object exists",
        "1",
        parse=integer(1, MAX_WORKERS),
    )


def check_workers_address(
    workers: int, address: str, workers_setting: Setting[int], address_setting: Setting[str]
) -> None:
    """Refuse several workers on a unix socket: only a TCP port can be shared (SO_REUSEPORT)."""
    if workers > 1 and address.startswith(addresses.UNIX_SCHEMES):
        raise SettingError(
            f"{workers_setting.names}: {workers} workers need a host:port address to share, not {address!r} "
            f"({address_setting.names})"
        )


PORT_FILE = Setting("port_file", "", "write the bound port to this file once serving", flag_only=True, parse=path)


MIGRATE_MODES = ("auto", "off")


def migrate_mode(value: str) -> bool:
    """Return True for ``auto`` (migrate at start) and False for ``off`` (any case)."""
    mode = value.strip().lower()
    if mode not in MIGRATE_MODES:
        raise ValueError(f"expected auto or off, not {value!r}")
    return mode == "auto"


def migrate_setting(service: str, program: str) -> Setting[bool]:
    """The ``--migrate`` setting of a server (``DECISIONFLOW_<SERVICE>_MIGRATE``): auto or off."""
    return Setting(
        "migrate",
        f"DECISIONFLOW_{service}_MIGRATE",
        "auto: bring the database to the newest schema at start; off: refuse to start unless it is there "
        f"already (run `{program} migrate` first, as production upgrades do)",
        "auto",
        parse=migrate_mode,
    )


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """A service's Prometheus endpoint: its port (unset: no endpoint) and the address it binds."""

    port: Setting[int]
    address: Setting[str]

    @property
    def all(self) -> tuple[Setting[Any], ...]:
        """Both settings, in the order the help and the README list them."""
        return (self.port, self.address)


def metrics_settings(service: str, *, port_note: str = "", workers: bool = False) -> MetricsSettings:
    """The ``--metrics-port`` and ``--metrics-address`` settings of a service
    (``DECISIONFLOW_<SERVICE>_METRICS_PORT`` / ``_METRICS_ADDRESS``); off unless a port is given."""
    prefix = f"DECISIONFLOW_{service}_"
    return MetricsSettings(
        Setting(
            "metrics_port",
            prefix + "METRICS_PORT",
            f"serve Prometheus metrics over HTTP at this port{port_note}; unset: none, 0 picks a free one"
            + ("; with --workers N, worker i (from 0) serves its own at this port + i" if workers else ""),
            parse=port,
        ),
        Setting(
            "metrics_address",
            prefix + "METRICS_ADDRESS",
            "address the metrics endpoint binds (0.0.0.0 lets a Prometheus in another container scrape it)",
            "127.0.0.1",
            parse=non_empty,
        ),
    )

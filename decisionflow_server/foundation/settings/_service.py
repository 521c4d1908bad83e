"""The settings every server (or every service) declares alike, named per service
(``DECISIONFLOW_<SERVICE>_...``): log levels, shutdown grace, worker processes, the port file,
schema migration at start and the metrics endpoint; ``server_settings`` declares them all for one gRPC server,
with the address it listens on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
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
    target,
)
from decisionflow_server.foundation.settings._security import database_url_file_setting
from decisionflow_server.foundation.settings._setting import Setting, SettingError
from decisionflow_server.foundation.settings._transport import TransportSettings, transport_settings
from decisionflow_server.foundation.settings._values import SettingValues


@dataclass(frozen=True, slots=True)
class LogSettings:
    """A service's log levels: its own, and that of gRPC core's lines in its log (see ``log_settings``)."""

    level: Setting[str]
    grpc_level: Setting[str]


def log_settings(service: str, default: str) -> LogSettings:
    """The ``--log-level`` (``DECISIONFLOW_<SERVICE>_LOG_LEVEL``, default as given) and ``--grpc-log-level``
    (``DECISIONFLOW_<SERVICE>_GRPC_LOG_LEVEL``) settings of a service: which of gRPC core's own lines its log
    keeps, as JSON lines (decisionflow_server.runtime.grpc_core_logs)."""
    return LogSettings(
        Setting(
            "log_level", f"DECISIONFLOW_{service}_LOG_LEVEL", "debug, info, warning or error", default, parse=log_level
        ),
        Setting(
            "grpc_log_level",
            f"DECISIONFLOW_{service}_GRPC_LOG_LEVEL",
            "gRPC core's own log lines kept in the log, as JSON lines on the logger grpc: off, error, warning or "
            "info (info adds, for example, a peer's GOAWAY; gRPC's GRPC_TRACE and GRPC_VERBOSITY=debug add its "
            "traces at info)",
            "error",
            parse=grpc_log_level,
        ),
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


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What every gRPC server declares alike (see ``server_settings``); its configuration names each in the
    field that holds its value, in the order that server's help and README table list them."""

    address: Setting[str]
    database_url_file: Setting[str]
    migrate: Setting[bool]
    transport: TransportSettings
    metrics: MetricsSettings
    workers: Setting[int]
    shutdown_grace: Setting[float]
    logs: LogSettings
    port_file: Setting[Path]

    def check_workers(self, values: SettingValues) -> None:
        """Refuse several workers on a unix socket: only a TCP port can be shared (SO_REUSEPORT)."""
        workers, address = values.required(self.workers), values.required(self.address)
        if workers > 1 and address.startswith(addresses.UNIX_SCHEMES):
            raise SettingError(
                f"{self.workers.names}: {workers} workers need a host:port address to share, not {address!r} "
                f"({self.address.names})"
            )


def server_settings(service: str, program: str, address: str) -> ServerSettings:
    """The settings every gRPC server declares alike, for service (``DECISIONFLOW_<SERVICE>_...``) run as
    program: the address it listens on (by default address), the database URL from a file, migration at
    start, transport limits, the metrics endpoint (one per worker), worker processes, shutdown grace, log
    levels (info by default) and the port file."""
    return ServerSettings(
        Setting(
            "address",
            f"DECISIONFLOW_{service}_ADDRESS",
            "host:port to listen on (port 0 picks a free one)",
            address,
            parse=target,
        ),
        database_url_file_setting(service),
        migrate_setting(service, program),
        transport_settings(service),
        metrics_settings(service, workers=True),
        workers_setting(service),
        shutdown_grace_setting(service),
        log_settings(service, "info"),
        PORT_FILE,
    )

"""Configuration settings: one declaration per setting gives its flag, environment variable,
default, help text and typed parser, so the command line, the environment, the README's
configuration reference and the checks on each value cannot drift apart.

A value comes from the flag if given, else the environment, else the default. A setting with no
default that is unset, or set to the empty string, is None. Every other value goes through the
setting's parser; a parser raises ValueError saying what it accepts, and ``parse_settings`` turns
that into a SettingError naming the flag and the environment variable, which each command reports
as a usage error (exit status 2).

A service's configuration is a dataclass whose fields are its settings (``_fields``): a field
names its setting, so its default, its option and its row in the README's table all follow from
the one declaration, and ``load`` fills any configuration the same way.

Parts: ``_setting`` (the declaration, SettingError, the README table), ``_values`` (options,
resolution and parsing into SettingValues), ``_fields`` (settings as a configuration dataclass's
fields, and the one loader), ``_parsers`` (text to typed values), ``_security``
(secrets from files, checkpoint keys, the cleartext opt-in), ``_transport`` (a server's transport
limits), ``_service`` (what every server declares alike: log levels, shutdown grace, workers,
port file, migration, metrics; ``server_settings`` all of them) and ``_targets`` (where each server
listens by default, and the settings, one per server and meaning, that tell its clients where to call
it and which CA to trust).
"""

from __future__ import annotations

from decisionflow_server.foundation.settings._fields import declared, group, load, part, required, value, value_or_none
from decisionflow_server.foundation.settings._parsers import (
    FALSE_WORDS,
    GRPC_LOG_LEVELS,
    LOG_LEVELS,
    MAX_AGE,
    TRUE_WORDS,
    Network,
    age,
    boolean,
    grpc_log_level,
    integer,
    log_level,
    networks,
    non_empty,
    path,
    port,
    positive_seconds,
    rate,
    readable_file,
    seconds,
    target,
    text,
    zero_or_integer,
)
from decisionflow_server.foundation.settings._security import (
    checkpoint_keys,
    cleartext_token_setting,
    client_tls_settings,
    database_url_file_setting,
    from_file,
    in_file,
    token_file,
)
from decisionflow_server.foundation.settings._service import (
    MAX_WORKERS,
    MIGRATE_MODES,
    PORT_FILE,
    LogSettings,
    MetricsSettings,
    ServerSettings,
    log_settings,
    metrics_settings,
    migrate_mode,
    migrate_setting,
    server_settings,
    shutdown_grace_setting,
    workers_setting,
)
from decisionflow_server.foundation.settings._setting import Setting, SettingError, markdown_table
from decisionflow_server.foundation.settings._targets import (
    ORCHESTRATOR_ADDRESS,
    RECEIVER_ADDRESS,
    RETIRED_TLS_VARIABLES,
    orchestrator_target_setting,
    orchestrator_tls_settings,
    receiver_target_setting,
    receiver_tls_settings,
    refuse_retired_tls_variables,
)
from decisionflow_server.foundation.settings._transport import TransportSettings, transport_settings
from decisionflow_server.foundation.settings._values import SettingValues, add_settings, parse_settings, resolve

__all__ = [
    "FALSE_WORDS",
    "GRPC_LOG_LEVELS",
    "LOG_LEVELS",
    "MAX_AGE",
    "MAX_WORKERS",
    "MIGRATE_MODES",
    "ORCHESTRATOR_ADDRESS",
    "PORT_FILE",
    "RECEIVER_ADDRESS",
    "RETIRED_TLS_VARIABLES",
    "TRUE_WORDS",
    "LogSettings",
    "MetricsSettings",
    "Network",
    "ServerSettings",
    "Setting",
    "SettingError",
    "SettingValues",
    "TransportSettings",
    "add_settings",
    "age",
    "boolean",
    "checkpoint_keys",
    "cleartext_token_setting",
    "client_tls_settings",
    "database_url_file_setting",
    "declared",
    "from_file",
    "group",
    "grpc_log_level",
    "in_file",
    "integer",
    "load",
    "log_level",
    "log_settings",
    "markdown_table",
    "metrics_settings",
    "migrate_mode",
    "migrate_setting",
    "networks",
    "non_empty",
    "orchestrator_target_setting",
    "orchestrator_tls_settings",
    "parse_settings",
    "part",
    "path",
    "port",
    "positive_seconds",
    "rate",
    "readable_file",
    "receiver_target_setting",
    "receiver_tls_settings",
    "refuse_retired_tls_variables",
    "required",
    "resolve",
    "seconds",
    "server_settings",
    "shutdown_grace_setting",
    "target",
    "text",
    "token_file",
    "transport_settings",
    "value",
    "value_or_none",
    "workers_setting",
    "zero_or_integer",
]

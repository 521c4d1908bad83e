"""Configuration settings: one declaration per setting gives its flag, environment variable,
default, help text and typed parser, so the command line, the environment, the README's
configuration reference and the checks on each value cannot drift apart.

A value comes from the flag if given, else the environment, else the default. A setting with no
default that is unset, or set to the empty string, is None. Every other value goes through the
setting's parser; a parser raises ValueError saying what it accepts, and ``parse_settings`` turns
that into a SettingError naming the flag and the environment variable, which each command reports
as a usage error (exit status 2).

Parts: ``_setting`` (the declaration, SettingError, the README table), ``_values`` (options,
resolution and parsing into SettingValues), ``_parsers`` (text to typed values), ``_security``
(secrets from files, checkpoint keys, the cleartext opt-in), ``_transport`` (a server's transport
limits) and ``_service`` (what every server declares alike: log levels, shutdown grace, workers,
port file, migration, metrics).
"""

from __future__ import annotations

from decisionflow_server.foundation.settings._parsers import (
    FALSE_WORDS,
    GRPC_LOG_LEVELS,
    LOG_LEVELS,
    MAX_AGE,
    TRUE_WORDS,
    age,
    boolean,
    grpc_log_level,
    integer,
    log_level,
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
    database_url_file_setting,
    from_file,
    token_file,
)
from decisionflow_server.foundation.settings._service import (
    MAX_WORKERS,
    MIGRATE_MODES,
    PORT_FILE,
    MetricsSettings,
    check_workers_address,
    grpc_log_level_setting,
    log_level_setting,
    metrics_settings,
    migrate_mode,
    migrate_setting,
    shutdown_grace_setting,
    workers_setting,
)
from decisionflow_server.foundation.settings._setting import Setting, SettingError, markdown_table
from decisionflow_server.foundation.settings._transport import TransportSettings, transport_settings
from decisionflow_server.foundation.settings._values import SettingValues, add_settings, parse_settings, resolve

__all__ = [
    "FALSE_WORDS",
    "GRPC_LOG_LEVELS",
    "LOG_LEVELS",
    "MAX_AGE",
    "MAX_WORKERS",
    "MIGRATE_MODES",
    "PORT_FILE",
    "TRUE_WORDS",
    "MetricsSettings",
    "Setting",
    "SettingError",
    "SettingValues",
    "TransportSettings",
    "add_settings",
    "age",
    "boolean",
    "check_workers_address",
    "checkpoint_keys",
    "cleartext_token_setting",
    "database_url_file_setting",
    "from_file",
    "grpc_log_level",
    "grpc_log_level_setting",
    "integer",
    "log_level",
    "log_level_setting",
    "markdown_table",
    "metrics_settings",
    "migrate_mode",
    "migrate_setting",
    "non_empty",
    "parse_settings",
    "path",
    "port",
    "positive_seconds",
    "rate",
    "readable_file",
    "resolve",
    "seconds",
    "shutdown_grace_setting",
    "target",
    "text",
    "token_file",
    "transport_settings",
    "workers_setting",
    "zero_or_integer",
]

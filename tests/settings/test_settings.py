"""Typed settings: each parser accepts its documented form and refuses the rest, and every service
reports a bad value as a usage error (exit 2) naming the flag and the environment variable."""

from __future__ import annotations

import argparse
import grp
import math
import os
import pwd
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from decisionflow_cli import main as cli_main
from decisionflow_relay import config as relay_config
from decisionflow_server.foundation import settings
from decisionflow_server.foundation.settings import Setting, SettingError, parse_settings
from effect_receiver import config as receiver_config
from orchestrator import config as orchestrator_config
from orchestrator import main as orchestrator_main
from orchestrator.quotas import AuthorLimits
from orchestrator.validation import MAX_CONTENT_BYTES
from reconciler import config as reconciler_config

KEY = "k" * 32
SERVICE_SETTINGS: dict[str, tuple[Setting[Any], ...]] = {
    "orchestrator": orchestrator_config.SETTINGS,
    "receiver": receiver_config.SETTINGS,
    "reconciler": (*reconciler_config.SETTINGS, *reconciler_config.SWITCHES),
    "relay": relay_config.SETTINGS,
}


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("1.5", 1.5), ("  30 ", 30.0), ("1e3", 1000.0)])
def test_seconds_accepts_finite_non_negative_numbers(text: str, value: float) -> None:
    assert settings.seconds(text) == value


@pytest.mark.parametrize("text", ["", "soon", "-1", "nan", "inf", "-inf", "1e999"])
def test_seconds_refuses_anything_else_and_says_what_it_takes(text: str) -> None:
    with pytest.raises(ValueError, match="expected a non-negative number of seconds"):
        settings.seconds(text)


@pytest.mark.parametrize("text", ["0", "0.0", "-0", "nan", "soon"])
def test_positive_seconds_refuses_zero_too(text: str) -> None:
    with pytest.raises(ValueError, match="expected a positive number of seconds"):
        settings.positive_seconds(text)
    assert math.isclose(settings.positive_seconds("0.25"), 0.25)


@pytest.mark.parametrize(
    ("text", "value"),
    [(word, True) for word in ("true", "TRUE", "yes", "on", "1")]
    + [(word, False) for word in ("false", "False", "no", "off", "0")],
)
def test_boolean_has_one_vocabulary(text: str, value: bool) -> None:
    assert settings.boolean(text) is value


@pytest.mark.parametrize("text", ["", "maybe", "2", "t", "y"])
def test_boolean_refuses_other_words(text: str) -> None:
    with pytest.raises(ValueError, match="expected one of true/yes/on/1 or false/no/off/0"):
        settings.boolean(text)


def test_log_levels() -> None:
    assert [settings.log_level(t) for t in ("DEBUG", "info", "Warning", "error")] == list(settings.LOG_LEVELS)
    with pytest.raises(ValueError, match="expected one of debug, info, warning, error, not 'chatty'"):
        settings.log_level("chatty")


@pytest.mark.parametrize("text", ["-1", "65536", "9102.5", "port"])
def test_port_is_a_whole_number_from_0_to_65535(text: str) -> None:
    assert (settings.port("0"), settings.port("65535")) == (0, 65535)
    with pytest.raises(ValueError, match="expected a whole number from 0 to 65535"):
        settings.port(text)


def test_a_token_file_is_read_stripped(tmp_path: Path) -> None:
    file = tmp_path / "ops.token"
    file.write_text("  s3cret-token\n")
    assert settings.token_file(str(file)) == "s3cret-token"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "non-empty printable text without spaces"),
        (b" \n\t\n", "non-empty printable text without spaces"),
        (b"two words\n", "non-empty printable text without spaces"),
        (b"tok\x07en", "non-empty printable text without spaces"),
        (b"\xff\xfe", "is not UTF-8 text"),
    ],
)
def test_an_unusable_token_file_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    file = tmp_path / "bad.token"
    file.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        settings.token_file(str(file))


def test_a_missing_or_unreadable_token_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read token file"):
        settings.token_file(str(tmp_path / "absent.token"))
    with pytest.raises(ValueError, match="cannot read token file"):
        settings.token_file(str(tmp_path))


def test_a_readable_file_must_exist_and_be_a_file(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    assert settings.readable_file(str(ca)) == ca
    for absent in (tmp_path / "absent.pem", tmp_path):
        with pytest.raises(ValueError, match="expected a readable file"):
            settings.readable_file(str(absent))


def test_checkpoint_keys_are_comma_separated_and_long_enough() -> None:
    parse = settings.checkpoint_keys(32)
    assert parse(f" {KEY} , {'j' * 40},") == (KEY.encode(), b"j" * 40)
    with pytest.raises(ValueError, match="an empty list"):
        parse(" , ")
    with pytest.raises(ValueError, match="at least 32 bytes; key 2 of 2 is shorter") as refused:
        parse(f"{KEY},short-secret")
    assert "short-secret" not in str(refused.value)  # a secret never reaches a log or a terminal


def test_values_come_from_the_flag_then_the_environment_then_the_default() -> None:
    grace = Setting("grace_seconds", "X_GRACE_SECONDS", "grace", "10", parse=settings.seconds)
    token = Setting("token_file", "X_TOKEN_FILE", "token", parse=settings.token_file)
    declared = (grace, token)
    assert parse_settings(argparse.Namespace(grace_seconds=None), declared, {})[grace] == 10.0
    assert parse_settings(argparse.Namespace(), declared, {"X_GRACE_SECONDS": "3"})[grace] == 3.0
    flagged = parse_settings(argparse.Namespace(grace_seconds="1"), declared, {"X_GRACE_SECONDS": "3"})
    assert flagged[grace] == 1.0
    # An empty variable of a setting without a default is the same as an unset one.
    assert parse_settings(argparse.Namespace(), declared, {"X_TOKEN_FILE": ""})[token] is None
    with pytest.raises(SettingError, match=r"^--token-file \(env X_TOKEN_FILE\) is required$"):
        parse_settings(argparse.Namespace(), declared, {}).required(token)
    with pytest.raises(SettingError, match=r"^--grace-seconds \(env X_GRACE_SECONDS\): expected a non-negative"):
        parse_settings(argparse.Namespace(), declared, {"X_GRACE_SECONDS": "soon"})


@pytest.mark.parametrize("service", sorted(SERVICE_SETTINGS))
def test_every_setting_of_every_service_declares_a_parser(service: str) -> None:
    for setting in SERVICE_SETTINGS[service]:
        assert setting.parse is not settings.text, f"{service} {setting.flag} is parsed as plain text"
        assert setting.flag_only or setting.switch or setting.env.startswith("DECISIONFLOW_"), setting


@pytest.mark.parametrize("service", ["orchestrator", "receiver"])
def test_workers_default_to_one_and_need_a_port_to_share(service: str, capsys: pytest.CaptureFixture[str]) -> None:
    load, argv, environ = LOADERS[service]
    prefix = "DECISIONFLOW_ORCHESTRATOR_" if service == "orchestrator" else "DECISIONFLOW_RECEIVER_"
    assert getattr(load(argv, environ), "workers") == 1  # noqa: B009 - the loaders return either config
    assert getattr(load(argv, {**environ, prefix + "WORKERS": "2"}), "workers") == 2  # noqa: B009
    with pytest.raises(SystemExit) as exited:
        load([*argv, "--workers", "2", "--address", "unix:/tmp/decisionflow.sock"], environ)
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--workers (env {prefix}WORKERS): 2 workers need a host:port address" in error, error


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("2.5", 2.5), (" 20 ", 20.0)])
def test_a_rate_is_a_finite_non_negative_number(text: str, value: float) -> None:
    assert settings.rate(text) == value
    for refused in ("-1", "nan", "inf", "fast"):
        with pytest.raises(ValueError, match="expected a non-negative number"):
            settings.rate(refused)


def test_zero_or_a_whole_number_in_range() -> None:
    parse = settings.zero_or_integer(100, 1000)
    assert (parse("0"), parse("100"), parse("1000")) == (0, 100, 1000)
    for refused in ("99", "1001", "-1", "1e3", "x"):
        with pytest.raises(ValueError, match="expected 0 or a whole number from 100 to 1000"):
            parse(refused)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("2h", 7200), ("30d", 2592000)])
def test_an_age_is_seconds_or_a_number_with_a_unit(text: str, seconds: int) -> None:
    assert settings.age(text).total_seconds() == seconds
    with pytest.raises(ValueError, match="expected seconds or a number with s, m, h or d"):
        settings.age("a month")
    with pytest.raises(ValueError, match="expected at most 100 years"):
        settings.age("36526d")


def test_author_budgets_come_from_flags_and_environment(capsys: pytest.CaptureFixture[str]) -> None:
    environ = {"DECISIONFLOW_CHECKPOINT_KEYS": KEY}
    default = orchestrator_config.load([], environ).author_limits
    assert default == AuthorLimits(20.0, 100, 16 * 1024 * 1024, 1000)
    given = orchestrator_config.load(
        ["--author-calls-per-second", "0.5", "--author-open-reviews", "0"],
        {**environ, "DECISIONFLOW_AUTHOR_CALL_BURST": "3", "DECISIONFLOW_AUTHOR_CONTENT_BYTES_PER_MINUTE": "0"},
    ).author_limits
    assert given == AuthorLimits(0.5, 3, 0, 0)
    # A content budget too small for the largest valid proposal would refuse it for ever.
    with pytest.raises(SystemExit) as exited:
        orchestrator_config.load(["--author-content-bytes-per-minute", str(MAX_CONTENT_BYTES - 1)], environ)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--author-content-bytes-per-minute (env DECISIONFLOW_AUTHOR_CONTENT_BYTES_PER_MINUTE)" in error
    assert f"expected 0 or a whole number from {MAX_CONTENT_BYTES}" in error


def test_transport_limits_come_from_flags_and_environment() -> None:
    default = receiver_config.load([], {}).transport
    assert (default.max_concurrent_streams, default.max_connection_idle_seconds) == (64, 300.0)
    assert (default.max_connection_age_seconds, default.max_connection_age_grace_seconds) == (1800.0, 30.0)
    assert default.max_connections == 1000
    environ = {"DECISIONFLOW_CHECKPOINT_KEYS": KEY, "DECISIONFLOW_ORCHESTRATOR_MAX_CONNECTIONS": "7"}
    limits = orchestrator_config.load(["--max-connection-age-seconds", "60"], environ).transport
    assert (limits.max_connections, limits.max_connection_age_seconds) == (7, 60.0)
    options = dict(limits.server_options(orchestrator_main.RECEIVE_LIMITS))
    assert options["grpc.max_allowed_incoming_connections"] == 7
    assert options["grpc.max_connection_age_ms"] == 60_000
    assert options["grpc.max_receive_message_length"] == orchestrator_main.RECEIVE_LIMITS.largest


Loader = Callable[[Sequence[str], Mapping[str, str]], object]
LOADERS: dict[str, tuple[Loader, list[str], dict[str, str]]] = {
    "orchestrator": (orchestrator_config.load, [], {"DECISIONFLOW_CHECKPOINT_KEYS": KEY}),
    "receiver": (receiver_config.load, [], {}),
    "reconciler": (reconciler_config.load, ["--once"], {}),
    "relay": (relay_config.load, ["--cursor-file", "relay.cursor"], {}),
}


@pytest.mark.parametrize(
    ("service", "flag", "env", "value", "accepted"),
    [
        (
            "orchestrator",
            "--receiver-timeout-seconds",
            "DECISIONFLOW_RECEIVER_TIMEOUT_SECONDS",
            "0",
            "a positive number of seconds",
        ),
        (
            "orchestrator",
            "--shutdown-grace-seconds",
            "DECISIONFLOW_ORCHESTRATOR_SHUTDOWN_GRACE_SECONDS",
            "nan",
            "a non-negative number of seconds",
        ),
        ("orchestrator", "--four-eyes", "DECISIONFLOW_FOUR_EYES", "maybe", "true/yes/on/1 or false/no/off/0"),
        ("orchestrator", "--checkpoint-keys", "DECISIONFLOW_CHECKPOINT_KEYS", "short", "at least 32 bytes"),
        ("orchestrator", "--log-level", "DECISIONFLOW_ORCHESTRATOR_LOG_LEVEL", "loud", "debug, info, warning, error"),
        (
            "receiver",
            "--key-retention-seconds",
            "DECISIONFLOW_RECEIVER_KEY_RETENTION_SECONDS",
            "-5",
            "a positive number of seconds",
        ),
        (
            "receiver",
            "--shutdown-grace-seconds",
            "DECISIONFLOW_RECEIVER_SHUTDOWN_GRACE_SECONDS",
            "inf",
            "a non-negative number of seconds",
        ),
        ("receiver", "--log-level", "DECISIONFLOW_RECEIVER_LOG_LEVEL", "", "debug, info, warning, error"),
        (
            "orchestrator",
            "--max-concurrent-streams",
            "DECISIONFLOW_ORCHESTRATOR_MAX_CONCURRENT_STREAMS",
            "0",
            "a whole number from 1 to 10000",
        ),
        (
            "receiver",
            "--max-connection-idle-seconds",
            "DECISIONFLOW_RECEIVER_MAX_CONNECTION_IDLE_SECONDS",
            "0",
            "a positive number of seconds",
        ),
        (
            "reconciler",
            "--alert-after-seconds",
            "DECISIONFLOW_RECONCILER_ALERT_AFTER_SECONDS",
            "-1",
            "a non-negative number of seconds",
        ),
        ("reconciler", "--batch-size", "DECISIONFLOW_RECONCILER_BATCH_SIZE", "0", "a whole number from 1 to 1000"),
        ("orchestrator", "--workers", "DECISIONFLOW_ORCHESTRATOR_WORKERS", "0", "a whole number from 1 to 64"),
        ("receiver", "--workers", "DECISIONFLOW_RECEIVER_WORKERS", "65", "a whole number from 1 to 64"),
        ("reconciler", "--metrics-port", "DECISIONFLOW_RECONCILER_METRICS_PORT", "70000", "from 0 to 65535"),
        ("reconciler", "--ca-file", "DECISIONFLOW_RECONCILER_CA_FILE", "/nonexistent/ca.pem", "a readable file"),
        ("relay", "--ca-file", "DECISIONFLOW_ORCHESTRATOR_CA_FILE", "/nonexistent/ca.pem", "a readable file"),
        ("relay", "--stream-replicas", "DECISIONFLOW_RELAY_STREAM_REPLICAS", "4.5", "a whole number from 1 to 5"),
        ("relay", "--subject-prefix", "DECISIONFLOW_RELAY_SUBJECT_PREFIX", "a.*", "is not a subject prefix"),
        ("relay", "--nats-url", "DECISIONFLOW_RELAY_NATS_URL", "nats-1:4222", "is not a NATS URL"),
        ("relay", "--stream", "DECISIONFLOW_RELAY_STREAM", "A.B", "is not a stream name"),
        ("relay", "--max-in-flight", "DECISIONFLOW_RELAY_MAX_IN_FLIGHT", "0", "a whole number from 1 to 65536"),
    ],
)
@pytest.mark.parametrize("source", ["flag", "environment"])
def test_a_bad_value_is_a_usage_error_naming_flag_variable_and_accepted_form(
    service: str, flag: str, env: str, value: str, accepted: str, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    load, argv, environ = LOADERS[service]
    if source == "flag":
        argv = [*argv, f"{flag}={value}"]
    else:
        environ = {**environ, env: value}
    with pytest.raises(SystemExit) as exited:
        load(argv, environ)
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("decisionflow-") and ": error: " in error
    assert f"{flag} (env {env})" in error and accepted in error, error


# Every setting that reads a token file: its loader, arguments, other settings it needs, and its variable.
TOKEN_FILE_READERS: tuple[tuple[Callable[..., Any], list[str], dict[str, str], str], ...] = (
    (orchestrator_config.load, [], {"DECISIONFLOW_CHECKPOINT_KEYS": KEY}, "DECISIONFLOW_RECEIVER_TOKEN_FILE"),
    (reconciler_config.load, ["--once"], {}, "DECISIONFLOW_RECONCILER_ORCHESTRATOR_TOKEN_FILE"),
    (reconciler_config.load, ["--once"], {}, "DECISIONFLOW_RECONCILER_RECEIVER_TOKEN_FILE"),
    (relay_config.load, ["--cursor-file", "relay.cursor"], {}, "DECISIONFLOW_RELAY_TOKEN_FILE"),
)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "non-empty printable text"), (b"two words", "non-empty printable text"), (None, "cannot read token file")],
)
def test_every_token_file_is_read_and_checked_the_same_way(
    tmp_path: Path, content: bytes | None, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "bad.token"
    if content is not None:
        file.write_bytes(content)
    errors = []
    for load, argv, environ, env in TOKEN_FILE_READERS:
        with pytest.raises(SystemExit) as exited:
            load(argv, {**environ, env: str(file)})
        assert exited.value.code == 2
        errors.append(capsys.readouterr().err)
    assert cli_main(["status", "op-v1-x", "--token-file", str(file)]) == 2
    errors.append(capsys.readouterr().err)
    assert all(message in error and str(file) in error for error in errors), errors


@pytest.mark.parametrize("mode", [0o666, 0o602], ids=["0666", "0602"])
def test_a_token_file_everyone_may_write_is_refused_by_every_reader(
    tmp_path: Path, mode: int, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "shared.token"
    file.write_text("someone-elses-token\n")
    file.chmod(mode)
    errors = []
    for load, argv, environ, env in TOKEN_FILE_READERS:
        with pytest.raises(SystemExit) as exited:
            load(argv, {**environ, env: str(file)})
        assert exited.value.code == 2
        errors.append(capsys.readouterr().err.strip().splitlines()[-1])
    assert cli_main(["status", "op-v1-x", "--token-file", str(file)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    errors.append(line)
    wanted = f"token file {str(file)!r} is writable by everyone (mode {mode:04o})"
    assert all(wanted in error and "chmod go-w" in error for error in errors), errors
    assert all("someone-elses-token" not in error for error in errors)
    file.chmod(0o644)
    assert settings.token_file(str(file)) == "someone-elses-token"


def test_a_group_writable_token_file_is_read_only_when_the_group_is_the_owners_own(tmp_path: Path) -> None:
    file = tmp_path / "group.token"
    file.write_text("a-token\n")
    file.chmod(0o660)
    owner = pwd.getpwuid(os.getuid()).pw_name
    shared = next((g for g in grp.getgrall() if g.gr_name != owner), None)
    try:
        assert shared is not None
        os.chown(file, -1, shared.gr_gid)
    except (AssertionError, PermissionError):
        pytest.skip("cannot give the file another group here")
    with pytest.raises(ValueError, match=f"is writable by group {shared.gr_name} \\(mode 0660\\)"):
        settings.token_file(str(file))
    try:
        private = grp.getgrnam(owner)
    except KeyError:
        pytest.skip(f"{owner} has no private group here")
    if set(private.gr_mem) - {owner}:
        pytest.skip(f"{owner}'s group of the same name has other members")
    os.chown(file, -1, private.gr_gid)  # umask 002 on a user-private group: only the owner can write
    assert settings.token_file(str(file)) == "a-token"


def test_the_reconciler_alert_age_has_one_name(capsys: pytest.CaptureFixture[str]) -> None:
    from_flag = reconciler_config.load(["--once", "--alert-after-seconds", "45"], {})
    from_env = reconciler_config.load(["--once"], {"DECISIONFLOW_RECONCILER_ALERT_AFTER_SECONDS": "60"})
    assert (from_flag.alert_after_seconds, from_env.alert_after_seconds) == (45.0, 60.0)
    assert reconciler_config.ALERT_AFTER_SECONDS.key == "alert_after_seconds"
    reconciler_config.parser().print_help()
    assert "--alert-after-seconds ALERT_AFTER_SECONDS" in capsys.readouterr().out


def test_four_eyes_and_the_receiver_token_are_typed(tmp_path: Path) -> None:
    token = tmp_path / "orchestrator.token"
    token.write_text("writer-token\n")
    environ = {
        "DECISIONFLOW_CHECKPOINT_KEYS": f"{KEY},{'j' * 32}",
        "DECISIONFLOW_FOUR_EYES": "on",
        "DECISIONFLOW_RECEIVER_TOKEN_FILE": str(token),
        "DECISIONFLOW_ORCHESTRATOR_LOG_LEVEL": "DEBUG",
    }
    config = orchestrator_config.load(["--receiver-timeout-seconds", "2.5"], environ)
    assert config.checkpoint_keys == (KEY.encode(), b"j" * 32)
    assert (config.four_eyes, config.receiver_token, config.log_level) == (True, "writer-token", "debug")
    assert config.receiver_timeout_seconds == 2.5


@pytest.mark.parametrize("command", ["prune-checkpoints", "reopen-reviews"])
def test_housekeeping_checks_checkpoint_keys_like_the_server(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "orchestrator.db"
    extra = ["--older-than-days", "30"] if command == "prune-checkpoints" else []
    monkeypatch.setenv("DECISIONFLOW_CHECKPOINT_KEYS", "too-short")
    with pytest.raises(SystemExit) as exited:
        orchestrator_main.main([command, "--database-url", str(database), *extra])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--checkpoint-keys (env DECISIONFLOW_CHECKPOINT_KEYS): every key must be at least 32 bytes" in error
    assert "too-short" not in error
    assert not database.exists()  # refused before the database is opened


def test_reopen_reviews_requires_checkpoint_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "orchestrator.db"
    monkeypatch.delenv("DECISIONFLOW_CHECKPOINT_KEYS", raising=False)
    with pytest.raises(SystemExit) as exited:
        orchestrator_main.main(["reopen-reviews", "--database-url", str(database)])
    assert exited.value.code == 2
    assert "--checkpoint-keys (env DECISIONFLOW_CHECKPOINT_KEYS) is required" in capsys.readouterr().err
    assert not database.exists()


@pytest.mark.parametrize("days", ["nan", "inf", "-1", "36526", "soon"])
def test_prune_refuses_a_retention_that_is_not_0_to_100_years(
    days: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "orchestrator.db"
    with pytest.raises(SystemExit) as exited:
        orchestrator_main.main(["prune-checkpoints", "--database-url", str(database), "--older-than-days", days])
    assert exited.value.code == 2
    assert "argument --older-than-days: expected" in capsys.readouterr().err
    assert not database.exists()  # refused before the database is opened

"""Configurations whose fields are settings: a field's default is its setting's parsed default, loading
takes the flag, else the environment, else that default, and each service's configuration built with
nothing given equals what loading nothing gives (the defaults are written once, in the declarations)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from decisionflow_console import config as console_config
from decisionflow_server.foundation import settings
from decisionflow_server.foundation.settings import Setting
from effect_receiver import config as receiver_config
from orchestrator import config as orchestrator_config
from reconciler import config as reconciler_config

KEY = "k" * 32

GRACE = Setting("grace_seconds", "X_GRACE_SECONDS", "grace", "2.5", parse=settings.seconds)
TOKEN = Setting("token_file", "X_TOKEN_FILE", "token", parse=settings.token_file)
SECRET = Setting("secret", "X_SECRET", "secret", parse=settings.non_empty)
SECRET_FILE = settings.in_file(SECRET, "file holding the secret")
RATE = Setting("rate", "X_RATE", "rate", "20", parse=settings.rate)
BURST = Setting("burst", "X_BURST", "burst", "100", parse=settings.integer(1, 1000))


@dataclass(frozen=True, slots=True)
class Budget:
    rate: float
    burst: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    grace_seconds: float = settings.value(GRACE)
    token: str | None = settings.value_or_none(TOKEN)
    secret: str = settings.required(SECRET, or_file=SECRET_FILE)
    budget: Budget = settings.group(Budget, rate=RATE, burst=BURST)


def _load(argv: list[str], environ: dict[str, str]) -> Config:
    cli = argparse.ArgumentParser(prog="x")
    settings.add_settings(cli, settings.declared(Config))
    return settings.load(Config, cli, cli.parse_args(argv), environ)


def test_a_fields_default_is_its_settings_parsed_default() -> None:
    assert Config(secret="s") == Config(secret="s", grace_seconds=2.5, token=None, budget=Budget(20.0, 100))
    assert settings.declared(Config) == (GRACE, TOKEN, SECRET, SECRET_FILE, RATE, BURST)


def test_loading_takes_the_flag_then_the_environment_then_the_default(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(" from-file\n")
    assert _load(["--secret", "s"], {}) == Config(secret="s")
    loaded = _load(["--grace-seconds", "1", "--burst", "7"], {"X_GRACE_SECONDS": "3", "X_SECRET_FILE": str(secret)})
    assert loaded == Config(grace_seconds=1.0, secret="from-file", budget=Budget(20.0, 7))
    assert _load([], {"X_GRACE_SECONDS": "3", "X_SECRET": "s", "X_RATE": "0"}).budget == Budget(0.0, 100)


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        ([], {}, "--secret (env X_SECRET) is required (or give --secret-file (env X_SECRET_FILE))"),
        (["--secret", "s"], {"X_SECRET_FILE": "{file}"}, "give --secret (env X_SECRET) or --secret-file"),
        (["--secret", "s", "--burst", "0"], {}, "--burst (env X_BURST): expected a whole number from 1 to 1000"),
    ],
)
def test_a_missing_or_bad_value_is_a_usage_error_naming_the_setting(
    argv: list[str], environ: dict[str, str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-file")
    with pytest.raises(SystemExit) as exited:
        _load(argv, {name: value.format(file=secret) for name, value in environ.items()})
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_field_that_does_not_fit_its_setting_is_refused_when_the_class_is_made() -> None:
    with pytest.raises(TypeError, match="--token-file has no default"):
        settings.value(TOKEN)
    with pytest.raises(TypeError, match="--grace-seconds has a default, so is never None"):
        settings.value_or_none(GRACE)
    with pytest.raises(TypeError, match="--grace-seconds has a default, so is never missing"):
        settings.required(GRACE)


def test_each_service_configuration_has_its_settings_defaults(tmp_path: Path) -> None:
    key = tmp_path / "session.key"
    key.write_text("s" * 32)
    console = ["--oidc-issuer", "https://id.example.com", "--oidc-client-id", "console", "--session-key-file", str(key)]
    orchestrator = orchestrator_config.load([], {"DECISIONFLOW_CHECKPOINT_KEYS": KEY})
    assert orchestrator == orchestrator_config.OrchestratorConfig(checkpoint_keys=(KEY.encode(),))
    assert receiver_config.load([], {}) == receiver_config.ReceiverConfig()
    assert reconciler_config.load(["--once"], {}) == reconciler_config.ReconcilerConfig()
    assert console_config.load(console, {}) == console_config.ConsoleConfig(
        oidc_issuer="https://id.example.com", oidc_client_id="console", session_key=b"s" * 32
    )

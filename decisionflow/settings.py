"""Configuration settings: one declaration per setting gives its flag, environment variable,
default and help text, so the command line, the environment and the README's configuration
reference cannot drift apart."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration value: ``--flag`` on the command line or ``env`` in the environment."""

    key: str
    env: str
    help: str
    default: str | None = None
    flag_only: bool = False  # switches such as --once: no environment variable

    @property
    def flag(self) -> str:
        """The command-line flag for this setting."""
        return "--" + self.key.replace("_", "-")


def add_settings(parser: argparse.ArgumentParser, settings: Sequence[Setting]) -> None:
    """Add one option per setting; its value defaults to None so the environment can fill it."""
    for setting in settings:
        env_note = "" if setting.flag_only else f" [env {setting.env}]"
        default_note = "" if setting.default is None else f" (default: {setting.default})"
        parser.add_argument(setting.flag, dest=setting.key, default=None, help=setting.help + env_note + default_note)


def resolve(
    namespace: argparse.Namespace, settings: Sequence[Setting], environ: Mapping[str, str]
) -> dict[str, str | None]:
    """Return each setting's value: the flag if given, else the environment, else the default."""
    values: dict[str, str | None] = {}
    for setting in settings:
        value = getattr(namespace, setting.key, None)
        if value is None and not setting.flag_only:
            value = environ.get(setting.env)
        values[setting.key] = setting.default if value is None else value
    return values


def markdown_table(title: str, settings: Sequence[Setting]) -> str:
    """Return the settings as a Markdown table for the README's configuration reference."""
    lines = [f"#### {title}", "", "| flag | environment | default | meaning |", "|---|---|---|---|"]
    for s in settings:
        env = "" if s.flag_only else f"`{s.env}`"
        default = "" if s.default is None else f"`{s.default}`"
        lines.append(f"| `{s.flag}` | {env} | {default} | {s.help} |")
    return "\n".join(lines) + "\n"

"""The declaration of one setting, the error a bad value raises, and the README table of a list of
declarations."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from decisionflow_server.foundation.settings._parsers import text

T = TypeVar("T")


class SettingError(ValueError):
    """A setting's value is unusable; the message names the flag, the environment variable and the accepted form."""


# A setting declared without a parser keeps its text as given (its type is then Any to mypy).
_AS_GIVEN: Callable[[str], Any] = text


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One configuration value: ``--flag`` on the command line or ``env`` in the environment,
    turned into its type by ``parse``."""

    key: str
    env: str
    help: str
    default: str | None = None
    flag_only: bool = False  # no environment variable: given on the command line or not at all
    parse: Callable[[str], T] = _AS_GIVEN
    switch: bool = False  # a flag without a value, such as --once; implies flag_only

    @property
    def flag(self) -> str:
        """The command-line flag for this setting."""
        return "--" + self.key.replace("_", "-")

    @property
    def names(self) -> str:
        """The flag and (unless flag-only) the environment variable, as error messages name them."""
        return self.flag if self.flag_only or self.switch else f"{self.flag} (env {self.env})"


def markdown_table(title: str, settings: Sequence[Setting[Any]]) -> str:
    """Return the settings as a Markdown table for the README's configuration reference."""
    lines = [f"#### {title}", "", "| flag | environment | default | meaning |", "|---|---|---|---|"]
    for s in settings:
        env = "" if s.flag_only else f"`{s.env}`"
        default = "" if s.default is None else f"`{s.default}`"
        lines.append(f"| `{s.flag}` | {env} | {default} | {s.help} |")
    return "\n".join(lines) + "\n"

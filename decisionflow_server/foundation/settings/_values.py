"""From a command line and an environment to typed values: one option per setting, the flag over
the environment over the default, every value through its setting's parser."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

from decisionflow_server.foundation.settings._setting import Setting, SettingError

T = TypeVar("T")


def add_settings(parser: argparse.ArgumentParser, settings: Sequence[Setting[Any]]) -> None:
    """Add one option per setting; its value defaults to None so the environment can fill it."""
    for setting in settings:
        if setting.switch:
            parser.add_argument(
                setting.flag, dest=setting.key, action="store_const", const="true", default=None, help=setting.help
            )
            continue
        env_note = "" if setting.flag_only else f" [env {setting.env}]"
        default_note = "" if setting.default is None else f" (default: {setting.default})"
        parser.add_argument(setting.flag, dest=setting.key, default=None, help=setting.help + env_note + default_note)


def resolve(
    namespace: argparse.Namespace, settings: Sequence[Setting[Any]], environ: Mapping[str, str]
) -> dict[str, str | None]:
    """Return each setting's text: the flag if given, else the environment, else the default."""
    values: dict[str, str | None] = {}
    for setting in settings:
        value = getattr(namespace, setting.key, None)
        if value is None and not (setting.flag_only or setting.switch):
            value = environ.get(setting.env)
        values[setting.key] = setting.default if value is None else value
    return values


class SettingValues:
    """The parsed value of each setting, looked up by its declaration so the type follows."""

    def __init__(self, values: Mapping[str, object], given: frozenset[str] = frozenset()) -> None:
        self._values = dict(values)
        self._given = given  # keys set by a flag or the environment, not by a default

    def __getitem__(self, setting: Setting[T]) -> T | None:
        """Return the setting's parsed value, None when it is unset and has no default."""
        return cast("T | None", self._values[setting.key])

    def required(self, setting: Setting[T]) -> T:
        """Return the setting's parsed value; raise SettingError when it is unset."""
        value = self[setting]
        if value is None:
            raise SettingError(f"{setting.names} is required")
        return value

    def one_of(self, direct: Setting[T], in_file: Setting[T]) -> T | None:
        """Return in_file's value if it was given, else direct's (its default when unset); raise
        SettingError when both were given, since which one wins would be a guess."""
        if in_file.key in self._given:
            if direct.key in self._given:
                raise SettingError(f"give {direct.names} or {in_file.names}, not both")
            return self[in_file]
        return self[direct]

    def required_one_of(self, direct: Setting[T], in_file: Setting[T]) -> T:
        """Return one_of(direct, in_file); raise SettingError when neither is set."""
        value = self.one_of(direct, in_file)
        if value is None:
            raise SettingError(f"{direct.names} is required (or give {in_file.names})")
        return value


def parse_settings(
    namespace: argparse.Namespace, settings: Sequence[Setting[Any]], environ: Mapping[str, str]
) -> SettingValues:
    """Return every setting parsed by its own parser; raise SettingError naming the first bad one."""
    parsed: dict[str, object] = {}
    given: set[str] = set()
    for setting in settings:
        raw = resolve(namespace, (setting,), environ)[setting.key]
        if resolve(namespace, (replace(setting, default=None),), environ)[setting.key]:
            given.add(setting.key)
        if setting.switch:
            parsed[setting.key] = raw is not None
        elif raw is None or (raw == "" and setting.default is None):
            parsed[setting.key] = None
        else:
            try:
                parsed[setting.key] = setting.parse(raw)
            except ValueError as exc:
                raise SettingError(f"{setting.names}: {exc}") from None
    return SettingValues(parsed, frozenset(given))

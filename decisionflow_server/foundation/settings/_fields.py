"""A configuration as a dataclass whose fields are settings: each field names the setting (or the
few settings) its value comes from, so its default is the setting's own, the command line and the
README list the fields' settings in field order, and one loader fills any configuration.

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Config:
        address: str = settings.value(ADDRESS)                 # the setting's default when unset
        token: str | None = settings.value_or_none(TOKEN_FILE)  # None when unset
        keys: tuple[bytes, ...] = settings.required(KEYS, or_file=KEYS_FILE)  # unset: a usage error
        limits: Limits = settings.group(Limits, rate=RATE, burst=BURST)       # one value of several

    SETTINGS = settings.declared(Config)  # the options, in field order
    config = settings.load(Config, cli, cli.parse_args(argv), environ)

A field built from several settings is a ``part`` (``group`` when each of its value's fields is one
setting); its default is what it builds from the settings' defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from decisionflow_server.foundation.settings._setting import Setting, SettingError
from decisionflow_server.foundation.settings._values import SettingValues, parse_settings

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
C = TypeVar("C", bound="DataclassInstance")

_SOURCE = "decisionflow_server.foundation.settings"  # the key of a field's _Source in its metadata


@dataclass(frozen=True, slots=True)
class _Source:
    """The settings one field reads, and how their parsed values become the field's value."""

    declared: tuple[Setting[Any], ...]
    build: Callable[[SettingValues], Any]


def _field(declared: Sequence[Setting[Any]], build: Callable[[SettingValues], Any], *, required: bool) -> Any:
    source = {_SOURCE: _Source(tuple(declared), build)}
    if required:
        return dataclasses.field(metadata=source)
    return dataclasses.field(default=build(parse_settings(argparse.Namespace(), declared, {})), metadata=source)


def _from(setting: Setting[T], or_file: Setting[T] | None, *, required: bool) -> Any:
    def build(values: SettingValues) -> T | None:
        if or_file is None:
            return values.required(setting) if required else values[setting]
        return values.required_one_of(setting, or_file) if required else values.one_of(setting, or_file)

    return _field((setting,) if or_file is None else (setting, or_file), build, required=required)


def value(setting: Setting[T], *, or_file: Setting[T] | None = None) -> T:
    """A field holding setting's value, its default when unset; with or_file, the value in that file when
    it is given instead (both given: a SettingError)."""
    if setting.default is None and not setting.switch:
        raise TypeError(f"{setting.flag} has no default: its field is value_or_none or required")
    result: T = _from(setting, or_file, required=False)
    return result


def value_or_none(setting: Setting[T], *, or_file: Setting[T] | None = None) -> T | None:
    """A field holding setting's value, None when it is unset (or set to the empty string)."""
    if setting.default is not None or setting.switch:
        raise TypeError(f"{setting.flag} has a default, so is never None: its field is value")
    result: T | None = _from(setting, or_file, required=False)
    return result


def required(setting: Setting[T], *, or_file: Setting[T] | None = None) -> T:
    """A field holding setting's value, with no default: unset, loading raises SettingError naming it (and
    or_file)."""
    if setting.default is not None or setting.switch:
        raise TypeError(f"{setting.flag} has a default, so is never missing: its field is value")
    result: T = _from(setting, or_file, required=True)
    return result


def part(declared: Sequence[Setting[Any]], build: Callable[[SettingValues], T]) -> T:
    """A field holding what build makes of several settings' values (it may raise SettingError when they
    do not fit together); its default is what build makes of their defaults."""
    result: T = _field(declared, build, required=False)
    return result


def group(kind: Callable[..., T], **fields: Setting[Any]) -> T:
    """A field holding kind(name=value, ...), each of its fields from the setting named for it."""

    def build(values: SettingValues) -> T:
        return kind(**{name: values[setting] for name, setting in fields.items()})

    return part(tuple(fields.values()), build)


def _sources(config: type[DataclassInstance]) -> list[tuple[str, _Source]]:
    return [(f.name, f.metadata[_SOURCE]) for f in dataclasses.fields(config) if _SOURCE in f.metadata]


def declared(config: type[DataclassInstance]) -> tuple[Setting[Any], ...]:
    """Every setting config's fields read, in field order: its options, and its rows in the README."""
    return tuple(setting for _, source in _sources(config) for setting in source.declared)


def _no_check(_values: SettingValues) -> None:
    return None


def load(
    config: type[C],
    cli: argparse.ArgumentParser,
    namespace: argparse.Namespace,
    environ: Mapping[str, str],
    *,
    check: Callable[[SettingValues], None] = _no_check,
    also: Sequence[Setting[Any]] = (),
) -> C:
    """Return config filled from the parsed command line, else environ, else the defaults: every setting
    parsed (and those in also, which check may read), then check, then each field built in order. A
    SettingError on the way exits through cli.error (a usage error, status 2)."""
    try:
        values = parse_settings(namespace, (*declared(config), *also), environ)
        check(values)
        return config(**{name: source.build(values) for name, source in _sources(config)})
    except SettingError as error:
        cli.error(str(error))

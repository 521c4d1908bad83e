"""The line of a key in a TOML text, so that a problem found after parsing can name where it is.

tomllib keeps no positions, so the text is scanned once more, line by line: table headers
(``[a.b]``, ``[[a.b]]``, each array-of-tables header numbered from 0) and ``key = value`` lines,
dotted keys included. This is a reader for locating, not a parser: the text is known to be valid
TOML by then, and a key it cannot place (one inside an inline table) is found at the nearest key
or header that contains it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence

_BARE = r"[A-Za-z0-9_-]+"
_BASIC = r'"(?:[^"\\\n]|\\.)*"'
_LITERAL = r"'[^'\n]*'"
_SEGMENT = rf"(?:{_BARE}|{_BASIC}|{_LITERAL})"
_PATH = rf"{_SEGMENT}(?:[ \t]*\.[ \t]*{_SEGMENT})*"
_ARRAY_HEADER = re.compile(rf"[ \t]*\[\[[ \t]*({_PATH})[ \t]*\]\]")
_TABLE_HEADER = re.compile(rf"[ \t]*\[[ \t]*({_PATH})[ \t]*\]")
_KEY = re.compile(rf"[ \t]*({_PATH})[ \t]*=")
_SEGMENTS = re.compile(_SEGMENT)

Path = tuple[str | int, ...]


def _segments(path: str) -> list[str]:
    names = []
    for segment in _SEGMENTS.findall(path):
        if segment.startswith('"'):
            # A basic string's escapes are TOML's own; let tomllib read them.
            names.append(str(tomllib.loads(f"k = {segment}")["k"]))
        elif segment.startswith("'"):
            names.append(segment[1:-1])
        else:
            names.append(segment)
    return names


class KeyLines:
    """Where each table and key of a TOML text is first written (lines from 1)."""

    def __init__(self, text: str) -> None:
        self._lines: dict[Path, int] = {}
        self._arrays: dict[Path, int] = {}  # an array of tables' path -> the index of its last table
        table: Path = ()
        in_string: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_string is not None:
                if line.count(in_string) % 2:
                    in_string = None
                continue
            if found := _ARRAY_HEADER.match(line):
                table = self._array_table(_segments(found.group(1)), number)
            elif found := _TABLE_HEADER.match(line):
                table = self._resolve(_segments(found.group(1)))
                self._lines.setdefault(table, number)
            elif found := _KEY.match(line):
                key: Path = table
                for name in _segments(found.group(1)):
                    key = (*key, name)
                    self._lines.setdefault(key, number)
            # A multi-line string opened on this line hides the lines up to its end.
            for quotes in ('"""', "'''"):
                if line.count(quotes) % 2:
                    in_string = quotes

    def _resolve(self, names: Sequence[str]) -> Path:
        # Below an array of tables, a header names a key of its last table.
        path: Path = ()
        for name in names:
            path = (*path, name)
            if path in self._arrays:
                path = (*path, self._arrays[path])
        return path

    def _array_table(self, names: Sequence[str], number: int) -> Path:
        array = (*self._resolve(names[:-1]), names[-1])
        index = self._arrays.get(array, -1) + 1
        self._arrays[array] = index
        self._lines.setdefault(array, number)
        self._lines[(*array, index)] = number
        return (*array, index)

    def line_of(self, path: Sequence[str | int]) -> int:
        """Return the line of path, else of the nearest table or key that contains it, else 1."""
        where = tuple(path)
        while where:
            if where in self._lines:
                return self._lines[where]
            where = where[:-1]
        return 1

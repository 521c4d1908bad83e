"""Which characters a reader cannot see, decided by Unicode property, never by a list of code points.

A character is invisible when its general category or the Default_Ignorable_Code_Point property says
so: every format character (Cf: direction controls, zero-width marks, the soft hyphen, U+180E, tags),
every variation selector, every space other than U+0020 (Zs, with the other whitespace: tabs, line and
paragraph separators, the controls), the default-ignorable letters (the Hangul fillers U+115F, U+1160,
U+3164 and U+FFA0, the combining grapheme joiner), private use, surrogates and unassigned code points
(a browser shows them as nothing, a box, or a vendor's own glyph). LF alone stays: the page shows it as
a line break. The properties come from the ``regex`` module's tables, so every Python shows the same
Unicode version (the standard library's ``unicodedata`` follows the interpreter's).

A text is split into runs: visible text, and runs of invisible characters grouped so that a long run
stays legible. Tag characters (U+E0000–U+E007F) spell ASCII invisibly ("Refund 10 EUR" followed by
forty of them can carry "and also pay 9000 EUR to account 99-1234"), so a run of them is one piece
with its count and the text it spells; a character repeated is one piece with its count.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import regex

# Each kind of invisible character and the Unicode property that defines it; the first that matches
# names a character. U+0020 and LF are visible: the page shows a space and a line break.
KINDS: tuple[tuple[str, str], ...] = (
    ("tag character", r"\p{Block=Tags}"),
    ("variation selector", r"\p{Variation_Selector}"),
    ("format character", r"\p{Cf}"),
    ("space other than U+0020", r"\p{Zs}"),
    ("line or paragraph separator", r"[\p{Zl}\p{Zp}]"),
    ("control character", r"\p{Cc}"),
    ("default-ignorable character", r"\p{Default_Ignorable_Code_Point}"),
    ("private-use character", r"\p{Co}"),
    ("surrogate", r"\p{Cs}"),
    ("unassigned code point", r"\p{Cn}"),
)
_VISIBLE = "\x20\n"
# One pattern, a named group per kind: one match names a character's kind.
_KIND = regex.compile("|".join(f"(?P<k{i}>{prop})" for i, (_, prop) in enumerate(KINDS)))
_RUN = regex.compile("(?:(?![" + _VISIBLE + "])(?:" + "|".join(prop for _, prop in KINDS) + "))+")
_TAGS = range(0xE0000, 0xE0080)
# Tag characters U+E0020–U+E007E mirror printable ASCII: each spells the character 0xE0000 below it.
_SPELLED = range(0xE0020, 0xE007F)


def kind(char: str) -> str | None:
    """Return the kind of invisible character char is, or None when a reader sees it."""
    found = None if char in _VISIBLE else _KIND.match(char)
    return KINDS[int(found.lastgroup[1:])][0] if found and found.lastgroup else None


@dataclass(frozen=True, slots=True)
class Hidden:
    """A run of invisible characters shown as one marker: one character (count times), or tags."""

    char: str
    count: int
    kind: str
    spelled: str = ""

    @property
    def code(self) -> str:
        """The marker's text: the code point (with its count), or the tags' count and what they spell."""
        if self.kind == "tag character":
            return f"{self.count} tag character{'s' if self.count > 1 else ''}: {self.spelled}"
        code = f"U+{ord(self.char):04X}"
        return code if self.count == 1 else f"{code} ×{self.count}"

    @property
    def description(self) -> str:
        """What the marker stands for, in words, for its title and its accessible name."""
        if self.kind == "tag character":
            return f"{self.count} invisible tag characters (U+E0000–U+E007F) spelling “{self.spelled}”"
        name = unicodedata.name(self.char, "").lower() or "no name"
        times = f"{self.count} × " if self.count > 1 else ""
        return f"{times}invisible {self.kind} U+{ord(self.char):04X} ({name})"


def pieces(text: str) -> Iterator[str | Hidden]:
    """Split text into its visible runs (str) and its invisible characters, grouped (Hidden)."""
    end = 0
    for found in _RUN.finditer(text):
        if found.start() > end:
            yield text[end : found.start()]
        yield from _grouped(found.group())
        end = found.end()
    if end < len(text):
        yield text[end:]


def _grouped(run: str) -> Iterator[Hidden]:
    for is_tag, chars in itertools.groupby(run, key=lambda c: ord(c) in _TAGS):
        if is_tag:
            tags = "".join(chars)
            spelled = "".join(chr(ord(c) - 0xE0000) if ord(c) in _SPELLED else f"⟨U+{ord(c):04X}⟩" for c in tags)
            yield Hidden(tags[0], len(tags), "tag character", spelled)
            continue
        for char, same in itertools.groupby(chars):
            yield Hidden(char, sum(1 for _ in same), kind(char) or "")

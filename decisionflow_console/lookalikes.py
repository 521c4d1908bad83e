"""Words that mix scripts, as Unicode TS 39 defines it, and the letters in them that look like others.

"paypal.com", "apple" and "support" spelled with a Cyrillic a (U+0430) or o (U+043E) among Latin
letters read as the Latin words and are not. A word (a run of text without whitespace) mixes scripts when its letters,
leaving aside the characters every script shares (Common: digits, punctuation; Inherited: combining
marks), belong to more than one script, except the combinations TS 39's "Highly Restrictive" level
allows because one writing system uses them: Latin with Han, Hiragana and Katakana (Japanese), with
Han and Bopomofo (Chinese), with Han and Hangul (Korean). Text in one script, whatever it is (Polish,
Russian, Greek), is never marked. The scripts and the confusable pairs are Unicode's own data
(Scripts.txt, confusables.txt) as the ``confusable_homoglyphs`` package ships them.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Any

from confusable_homoglyphs import categories, confusables

# The script of a character, by a binary search of the package's ranges in Python: remembered.
_script = functools.lru_cache(maxsize=8192)(categories.alias)
# Characters that take the script of the letters around them.
_SHARED = frozenset({"COMMON", "INHERITED", "Unknown"})
# TS 39 §5.2: the script sets a "Highly Restrictive" identifier may combine besides a single script.
_WRITING_SYSTEMS = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)


@dataclass(frozen=True, slots=True)
class MixedScripts:
    """The scripts a word mixes (the one most of its letters use first) and its look-alike letters."""

    scripts: tuple[str, ...]
    lookalikes: tuple[str, ...]

    @property
    def code(self) -> str:
        """The marker's text: the scripts the word mixes."""
        return "mixed scripts: " + " + ".join(self.scripts)

    @property
    def description(self) -> str:
        """What the marker stands for, in words, for its title and its accessible name."""
        said = "this word mixes scripts (" + ", ".join(self.scripts) + ")"
        return said + ("; " + "; ".join(self.lookalikes) if self.lookalikes else "")


@functools.lru_cache(maxsize=4096)
def mixed_scripts(word: str) -> MixedScripts | None:
    """Return the scripts word mixes and the letters that imitate its main script's, or None if it mixes none."""
    used = Counter(alias for alias in map(_script, word) if alias not in _SHARED)
    if len(used) < 2 or any(used.keys() <= allowed for allowed in _WRITING_SYSTEMS):
        return None
    main = used.most_common(1)[0][0]
    found = confusables.is_confusable(word, greedy=True, preferred_aliases=[main]) or ()
    lookalikes = tuple(filter(None, (_looks_like(entry, main) for entry in found)))
    return MixedScripts(tuple(alias.title() for alias, _ in used.most_common()), lookalikes)


def _looks_like(entry: dict[str, Any], main: str) -> str | None:
    same = [g["c"] for g in entry["homoglyphs"] if all(categories.alias(c) == main for c in g["c"])]
    if not same:
        return None
    char = entry["character"]
    return f"{char} (U+{ord(char):04X}, {entry['alias'].title()}) looks like {' or '.join(same)} ({main.title()})"

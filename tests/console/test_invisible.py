"""Every character a reader cannot see is marked, decided by Unicode property over the whole table
(U+0000–U+10FFFF), and no visible letter, digit, mark, punctuation or symbol is; a sentence hidden in
tag characters is shown as the text it spells; a diff between lines that differ only by invisible
characters shows the difference."""

from __future__ import annotations

import dataclasses
import html
import unicodedata

import pytest
import regex

from decisionflow_console.diff import proposal_diff
from decisionflow_console.invisible import KINDS, kind
from decisionflow_console.marking import reveal
from decisionflow_console.pages import Pages
from decisionflow_console.review_pages import proposal_page
from tests.console.test_marking import OPERATION, PARENT

# The classes a reader cannot see, each by the Unicode property that defines it (the issue's list).
INVISIBLE = regex.compile(
    r"[\p{Cf}\p{Zs}\p{Zl}\p{Zp}\p{Cc}\p{Variation_Selector}\p{Default_Ignorable_Code_Point}\p{Co}\p{Cs}\p{Cn}]"
)
TABLE = [chr(cp) for cp in range(0x110000)]
HIDDEN = [c for c in TABLE if INVISIBLE.match(c) and c not in " \n"]
SHOWN = [c for c in TABLE if not INVISIBLE.match(c)]
TAGS = "".join(chr(0xE0000 + ord(c)) for c in " and also pay 9000 EUR to account 99-1234")


def test_the_classes_hold_what_the_issue_names() -> None:
    hidden = set(HIDDEN)
    named = {"\u00ad", "\u180e", "\u3164", "\u115f", "\u1160", "\uffa0", "\u00a0", "\u2028", "\u2029", "\t"}
    named |= {chr(cp) for cp in [*range(0xE0000, 0xE0080), *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]}
    assert named <= hidden
    assert all(unicodedata.category(c) == "Cf" for c in ("\u200b", "\u202e", "\ufeff", "\U000e0041"))
    assert {"a", "Z", "0", "ę", "\u0430", "ω", "日", "\u0301", ".", "€", " ", "\n"}.isdisjoint(hidden)


def test_every_invisible_code_point_is_named_by_a_kind_and_no_visible_one_is() -> None:
    assert [c for c in HIDDEN if kind(c) is None] == []
    assert [f"U+{ord(c):04X}" for c in SHOWN if kind(c) is not None] == []
    assert kind(" ") is None and kind("\n") is None
    assert {name for name, _ in KINDS} == {kind(c) for c in HIDDEN}


@pytest.mark.slow
@pytest.mark.parametrize("start", range(0, 0x110000, 0x10000), ids=lambda s: f"plane{s >> 16}")
def test_every_invisible_code_point_of_a_plane_is_marked_and_none_left_raw(start: int) -> None:
    chars = [c for c in HIDDEN if start <= ord(c) < start + 0x10000]
    # Apart, so each is its own marker; tags are counted as runs of one.
    shown = str(reveal("x".join(chars)))
    assert shown.count('class="hidden-char"') == len(chars)
    raw = [f"U+{ord(c):04X}" for c in chars if c in shown]
    assert raw == []


@pytest.mark.slow
def test_no_visible_character_is_marked() -> None:
    # Apart, so no two scripts share a word; "&", "<", ">" and quotes come back escaped.
    text = " ".join(SHOWN)
    shown = str(reveal(text))
    assert "hidden-char" not in shown and "mixed-script" not in shown
    assert html.unescape(shown) == text


def test_a_sentence_hidden_in_tag_characters_is_shown_as_the_text_it_spells() -> None:
    shown = str(reveal("Refund 10 EUR to the customer." + TAGS))
    assert "⟦41 tag characters:  and also pay 9000 EUR to account 99-1234⟧" in shown
    assert 'title="41 invisible tag characters (U+E0000–U+E007F) spelling “ and also pay 9000 EUR' in shown
    assert "\U000e0061" not in shown


def test_a_run_of_one_invisible_character_is_one_marker_with_its_count() -> None:
    shown = str(reveal("a" + "\u200b" * 500 + "b"))
    assert shown.count("hidden-char") == 1 and "⟦U+200B ×500⟧" in shown


def test_a_diff_of_lines_that_differ_only_by_invisible_characters_shows_them() -> None:
    before = dataclasses.replace(PARENT, body="Refund 10 EUR to the customer." + TAGS)
    after = dataclasses.replace(
        PARENT, operation_id="op-v1-b", parent_operation_id="op-v1-a", body="Refund 10\u00a0EUR to the cus\u00adtomer."
    )
    page = Pages().html(
        "proposal.html", person=None, csrf_token="t", **proposal_page(after, OPERATION, proposal_diff(before, after))
    )
    diff = page[page.index('id="diff"') : page.index("</pre>", page.index('id="diff"'))]
    assert "⟦U+00A0⟧" in diff and "⟦U+00AD⟧" in diff and "⟦41 tag characters:" in diff
    assert "\u00a0" not in diff and "\u00ad" not in diff

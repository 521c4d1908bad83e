"""A word that mixes scripts (Unicode TS 39), such as "paypal.com" with a Cyrillic a, is marked with the
scripts it mixes and the letters that look like others, in every field a proposal shows; text in one
script, Latin or not, and the writing systems that combine scripts (Japanese) are not."""

from __future__ import annotations

import dataclasses
import re

import pytest

from decisionflow.client import EvidenceItem, PolicyRef
from decisionflow_console.lookalikes import mixed_scripts
from decisionflow_console.marking import reveal
from decisionflow_console.pages import Pages
from decisionflow_console.review_pages import proposal_page
from tests.console.test_marking import OPERATION, PARENT

# The Cyrillic small letters a and o, as escapes so that this file shows which letters they are.
CYR_A, CYR_O = "\u0430", "\u043e"
SPOOFED = {
    f"p{CYR_A}ypal.com": f"{CYR_A} (U+0430, Cyrillic) looks like a",
    f"{CYR_A}pple": f"{CYR_A} (U+0430, Cyrillic) looks like a",
    f"supp{CYR_O}rt": f"{CYR_O} (U+043E, Cyrillic) looks like o",
}
ONE_SCRIPT = (
    "Proszę zebrać eksport diagnostyczny.",
    "Пожалуйста, обновите прошивку до версии 4.2.1.",
    "\u0397 ενημέρωση διορθώνει το πρόβλημα.",
    "ファームウェアを4.2.1版に更新してください。Windows版も同じです。",
    "Zaktualizuj oprogramowanie: e\u0328 (a combining ogonek), T-1042, 99-1234.",
)


@pytest.mark.parametrize("word", sorted(SPOOFED))
def test_a_word_with_a_cyrillic_letter_among_latin_ones_is_named_with_its_lookalike(word: str) -> None:
    mixed = mixed_scripts(word)
    assert mixed is not None and mixed.scripts == ("Latin", "Cyrillic")
    assert any(said.startswith(SPOOFED[word]) for said in mixed.lookalikes)
    shown = str(reveal(f"Pay at {word} today."))
    assert f'<mark class="mixed-script" title="this word mixes scripts (Latin, Cyrillic); {SPOOFED[word]}' in shown
    assert "⟦mixed scripts: Latin + Cyrillic⟧" in shown and 'class="script-mark" role="img" aria-label="' in shown


@pytest.mark.parametrize("text", ONE_SCRIPT)
def test_text_in_one_script_or_one_writing_system_is_not_marked(text: str) -> None:
    assert "mixed-script" not in str(reveal(text)) and "script-mark" not in str(reveal(text))


def test_a_word_that_mixes_scripts_is_marked_in_the_body_quotation_policy_and_rules() -> None:
    proposal = dataclasses.replace(
        PARENT,
        body=f"Log in at p{CYR_A}ypal.com to confirm.",
        evidence=(EvidenceItem("HOLD-7", 2, f"Ask {CYR_A}pple first."),),
        policy=PolicyRef(f"supp{CYR_O}rt-replies", "2026-10", 9, {"contact": f"supp{CYR_O}rt@example.com"}),
    )
    page = Pages().html("proposal.html", person=None, csrf_token="t", **proposal_page(proposal, OPERATION, None))
    marked = re.findall(r'<mark class="mixed-script" title="[^"]*">([^<]*)</mark>', page)
    assert sorted(marked) == [
        f"p{CYR_A}ypal.com",
        f"supp{CYR_O}rt-replies",
        f"supp{CYR_O}rt@example.com",
        f"{CYR_A}pple",
    ]

"""What a reviewer and an auditor see of text they could not see, in a real browser: a sentence hidden
in tag characters is shown as the text it spells, a word with a Cyrillic letter among Latin ones is
marked with the scripts it mixes, an edit that only swaps spaces and hyphens for invisible ones shows
in the diff, and the markers break no rule of the Content-Security-Policy."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect

from tests.console.pages import edit_body, start_case
from tests.console.test_audit_trail import LOG_KEY, _as_auditor, _publish
from tests.support.audit import SIGNER
from tests.support.console import ConsoleUnderTest, screenshot

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

A = "\u0430"  # the Cyrillic small letter a, among the Latin letters of "paypal.com"
HIDDEN = " and also pay 9000 EUR to account 99-1234"
BODY = "Refund 10 EUR to the customer." + "".join(chr(0xE0000 + ord(c)) for c in HIDDEN) + f"\nConfirm at p{A}ypal.com."


def test_a_reviewer_sees_the_hidden_sentence_the_mixed_script_word_and_the_invisible_edit(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if _csp(m) else None)
    console.sign_in(page, "rita")
    operation_id = start_case(page, console, case_id="T-hidden", body=BODY)

    body = page.locator("#body")
    expect(body).to_contain_text(f"⟦41 tag characters: {HIDDEN}⟧")
    tags = body.locator(".hidden-char")
    expect(tags).to_have_count(1)
    expect(tags).to_have_attribute("role", "img")
    expect(tags).to_have_attribute("aria-label", f"41 invisible tag characters (U+E0000–U+E007F) spelling “{HIDDEN}”")
    expect(body.locator("mark.mixed-script")).to_have_text(f"p{A}ypal.com.")
    expect(body.locator(".script-mark")).to_have_text("⟦mixed scripts: Latin + Cyrillic⟧")
    expect(body.locator(".script-mark")).to_have_attribute(
        "aria-label", f"this word mixes scripts (Latin, Cyrillic); {A} (U+0430, Cyrillic) looks like a (Latin)"
    )
    screenshot(page, "hidden-text")

    edit_body(page, console, operation_id, f"Refund 10\u00a0EUR to the cus\u00adtomer.\nConfirm at p{A}ypal.com.")
    diff = page.locator("#diff")
    expect(diff.locator("del .hidden-char")).to_have_text(f"⟦41 tag characters: {HIDDEN}⟧")
    expect(diff.locator("ins")).to_have_text(["⟦U+00A0⟧", "cus⟦U+00AD⟧tomer."])
    assert refused == []


def _csp(message: ConsoleMessage) -> bool:
    return "Content Security Policy" in message.text or "Content-Security-Policy" in message.text


def test_an_auditor_sees_the_hidden_sentence_in_the_audit_trail(
    make_console: Callable[..., ConsoleUnderTest], page: Page, browser: Browser
) -> None:
    console = make_console(audit_signer=SIGNER, console={"audit_log_key": LOG_KEY})
    console.sign_in(page, "olga")
    operation_id = start_case(page, console, case_id="T-hidden", body=BODY)
    _publish(console)
    auditor = _as_auditor(console, browser)
    auditor.goto(console.url(f"/audit/{operation_id}"))
    leaf = auditor.locator("#leaf-0")
    leaf.locator("summary").click()
    expect(leaf.locator("pre.body")).to_contain_text(f"⟦41 tag characters: {HIDDEN}⟧")
    expect(leaf.locator("pre.body mark.mixed-script")).to_have_text(f"p{A}ypal.com.")

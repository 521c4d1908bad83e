"""Words, not codes: every state, outcome, decision and lookup a page shows is said in the console's one
vocabulary (``decisionflow_console.words``); the code stays in a data attribute."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from decisionflow.client import Consistency, Decision, LookupStatus, OperationState, Outcome
from decisionflow_console.words import VOCABULARY, decision_in_words, in_words, state_in_words
from tests.console.pages import start_case
from tests.support.console import ConsoleUnderTest

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

# A code of the vocabulary as a page must never show it (the lowercase spellings included).
CODE = re.compile(
    r"\b(COMMITTED|UNKNOWN|DECLINED|REJECTED|APPROVED?|DECLINE|UNSPECIFIED|NOT_FOUND|APPLIED|EVENTUAL|STRONG"
    r"|PENDING_REVIEW|not_found|unspecified|eventual|strong)\b"
)


def test_every_code_of_every_vocabulary_has_words() -> None:
    for vocabulary in (OperationState, Outcome, Decision, LookupStatus, Consistency):
        for member in vocabulary:
            said = in_words(member)
            assert member.value in VOCABULARY[vocabulary], member
            assert not CODE.search(said) and "_" not in said, (member, said)
    assert decision_in_words("APPROVE") == "approved"
    assert state_in_words("COMMITTED") == "Committed"
    assert decision_in_words("MAYBE") == "MAYBE"  # a spelling this console does not know is shown as it is


def _no_code_in(page: Page) -> None:
    shown = page.locator("main").inner_text()
    assert not CODE.search(shown), CODE.findall(shown)


def test_outcomes_decisions_and_lookups_are_said_in_words(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console(receiver_timeout_seconds=1.0)
    console.sign_in(page, "olga")

    start_case(page, console, case_id="T-words-a")
    page.click("#approve")
    expect(page.locator("#outcome")).to_have_text("Approved and written")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
    _no_code_in(page)

    start_case(page, console, case_id="T-words-b")
    page.click("#decline")
    expect(page.locator("#outcome")).to_have_text("Declined")
    _no_code_in(page)

    pending = start_case(page, console, case_id="T-words-d")
    page.goto(console.url(f"/operations/{pending}"))
    expect(page.locator("#decision")).to_have_text("not decided yet")
    _no_code_in(page)

    unknown = start_case(page, console, case_id="T-words-c")
    console.servers.stop_receiver()
    page.click("#approve")
    expect(page.locator("#outcome")).to_have_text("Approved, not confirmed yet")
    _no_code_in(page)
    # A replica's lookup that found nothing, recorded: said as such on the confirmation, the operation and the desk.
    page.goto(console.url(f"/operations/{unknown}/settle"))
    page.check("input[name=status][value=not_found]")
    page.check("input[name=consistency][value=eventual]")
    page.click("#review")
    expect(page.locator("h1")).to_have_text("Record this lookup for case T-words-c?")
    expect(page.locator("main")).to_contain_text("not found by a replica (it may lag)")
    _no_code_in(page)
    page.click("#confirm")
    expect(page.locator("#outcome")).to_have_text("Lookup recorded")
    expect(page.locator("#decision")).to_contain_text("approved by olga")
    expect(page.locator("#last-lookup")).to_contain_text("not found by a replica (it may lag)")
    _no_code_in(page)
    page.goto(console.url("/operations?state=unknown"))
    expect(page.locator("#operations-unknown .last-lookup")).to_contain_text("not found by a replica (it may lag)")
    expect(page.locator("select#state")).to_have_value("unknown")  # the state asked for stays chosen
    _no_code_in(page)

    console.servers.restart_receiver()
    page.goto(console.url(f"/operations/{unknown}/redrive"))
    expect(page.locator("h1")).to_have_text("Re-drive case T-words-c?")
    page.click("#confirm")
    expect(page.locator("#outcome")).to_have_text("Approved and written")
    expect(page.locator("#state")).to_have_text("Committed")
    _no_code_in(page)

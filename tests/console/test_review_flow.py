"""The reviewer's path by keyboard alone, and the words for an orchestrator that is down."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.console.pages import start_case
from tests.support.console import ConsoleUnderTest

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

MAX_TABS = 40


def test_approve_with_the_keyboard_only(make_console: Callable[..., ConsoleUnderTest], page: Page) -> None:
    console = make_console()
    stack = console.stack
    console.sign_in(page, "ana")
    start_case(page, console, case_id="T-keys")
    # From the inbox: type the case, open it, tab to Approve, press Enter.
    page.goto(console.url("/inbox"))
    _tab_to(page, "#case_id")
    page.keyboard.type("T-keys")
    page.keyboard.press("Enter")
    expect(page.locator("#state")).to_have_text("Pending review")
    _tab_to(page, "#approve")
    page.keyboard.press("Enter")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
    assert stack.effects("T-keys") == 1
    # Back on the proposal: decisions are final; the page says which one stands and offers no action.
    page.go_back()
    expect(page.locator("#decided")).to_contain_text("Decided: approve")
    for action in ("#approve", "#decline", "#edit"):
        expect(page.locator(action)).to_have_count(0)
    assert stack.decisions() == 1


def test_an_orchestrator_that_is_down_is_said_in_words(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    stack = console.stack
    console.sign_in(page, "ana")
    start_case(page, console, case_id="T-down")
    stack.stop_orchestrator()
    page.click("#approve")
    expect(page.locator("h1")).to_have_text("The orchestrator is not answering")
    expect(page.locator("#refusal")).to_contain_text("Sending it again is safe")
    assert page.locator("section.refusal").get_attribute("data-reason") == "UNAVAILABLE"


def _tab_to(page: Page, selector: str) -> None:
    target = page.locator(selector)
    for _ in range(MAX_TABS):
        if target.evaluate("element => element === document.activeElement"):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"{selector} is not reachable with Tab")


def test_a_session_ends_at_its_lifetime_and_the_page_asks_to_sign_in_again(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console(console={"session_lifetime_seconds": 1.5})
    console.sign_in(page, "ana")
    page.goto(console.url("/start"))
    expect(page.locator("h1")).to_have_text("Start a case")
    page.wait_for_timeout(1600)
    page.goto(console.url("/start"))
    # Back at the provider's sign-in page, with the way back to /start kept.
    expect(page.get_by_role("button", name="Authorize")).to_be_visible()
    page.get_by_placeholder("sub").fill("ana")
    page.get_by_role("button", name="Authorize").click()
    expect(page.locator("h1")).to_have_text("Start a case")

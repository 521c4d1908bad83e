"""The article in the browser: an author starts case T-1042 and edits it in one tab; a second tab
still shows the old version and its approval is refused as stale, with a link to the current one;
approving the current one commits once, with its receipt, and a reload changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.console.pages import edit_body, start_case
from tests.support.console import ConsoleUnderTest, screenshot
from tests.support.stack import T1042_BODY

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

EDITED = T1042_BODY + "\nIf it happens again after 4.2.1, reply with the export attached."


def test_stale_tab_is_refused_and_the_current_proposal_commits_once(
    make_console: Callable[..., ConsoleUnderTest],
    context: BrowserContext,
    page: Page,
) -> None:
    console = make_console()
    stack = console.stack
    console.sign_in(page, "ana")
    first = start_case(page, console)
    assert first.startswith("op-v1-")
    expect(page.locator("#body")).to_have_text(T1042_BODY)
    expect(page.locator("#state")).to_have_text("Pending review")

    stale_tab = context.new_page()
    stale_tab.goto(console.url(f"/proposals/{first}"))
    current = edit_body(page, console, first, EDITED)
    assert current != first
    expect(page.locator("#human-edited")).to_have_text("yes")
    expect(page.locator("#diff .add")).to_contain_text(["+If it happens again after 4.2.1"])
    screenshot(page, "proposal")

    stale_tab.click("#approve")
    expect(stale_tab.locator("h1")).to_have_text("This proposal was replaced")
    expect(stale_tab.locator("#refusal")).to_contain_text(f"replaced by {current}")
    screenshot(stale_tab, "stale")
    stale_tab.click("#next")
    expect(stale_tab.locator("#operation-id")).to_have_text(current)
    stale_tab.click("#approve")
    expect(stale_tab.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
    receipt = stale_tab.locator("#receipt").inner_text()
    assert receipt
    screenshot(stale_tab, "committed")

    stale_tab.reload()  # the browser sends the approval again
    expect(stale_tab.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
    expect(stale_tab.locator("#receipt")).to_have_text(receipt)
    assert stack.effects("T-1042") == 1
    assert stack.decisions() == 1

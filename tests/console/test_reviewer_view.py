"""What a reviewer sees around a decision, in a real browser: the outcome names its case, a decided
proposal offers no action, a decision sent from a page loaded before another one is refused as already
decided, a refused decision leads back to its proposal, and every page has a skip link and an icon."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.console.pages import start_case
from tests.support.console import ConsoleUnderTest

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def test_a_decision_names_its_case_and_a_decided_proposal_offers_no_action(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    console.sign_in(page, "rita")
    operation_id = start_case(page, console, case_id="T-seen")
    earlier = page.context.new_page()  # the same proposal open in a second tab, before the decision
    earlier.goto(console.url(f"/proposals/{operation_id}"))
    page.click("#approve")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
    expect(page.locator("#outcome-case")).to_contain_text("Case T-seen")
    expect(page.locator("#outcome-case")).to_contain_text(operation_id)
    page.goto(console.url(f"/proposals/{operation_id}"))
    expect(page.locator("#decided")).to_contain_text("Decided: approve")
    expect(page.locator("#decline")).to_have_count(0)
    # The tab loaded before still shows the actions; its Decline is refused, and nothing changes.
    earlier.click("#decline")
    expect(earlier.locator("h1")).to_have_text("Already decided")
    expect(earlier.locator("#refusal")).to_contain_text("already recorded for this operation: approve")
    assert console.stack.decisions() == 1 and console.stack.effects("T-seen") == 1


def test_a_four_eyes_refusal_leads_back_to_the_proposal(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console(four_eyes=True)
    console.sign_in(page, "sam", groups=["authors", "reviewers"])
    operation_id = start_case(page, console, case_id="T-back")
    page.click("#approve")
    expect(page.locator("h1")).to_have_text("You cannot decide your own proposal")
    page.click("#next")
    expect(page.locator("#operation-id")).to_have_text(operation_id)


def test_every_page_has_a_skip_link_and_the_icon_is_served(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    console.sign_in(page, "rita")
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.goto(console.url("/inbox"))
    page.keyboard.press("Tab")
    expect(page.locator("a.skip")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(console.url("/inbox#main"))
    icon = page.request.get(console.url("/favicon.ico"))
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert missing == []


def test_signing_in_loads_nothing_from_beyond_this_machine(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    # The trial provider's sign-in page is styled by the page itself: no stylesheet from a CDN.
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    console = make_console()
    console.sign_in(page, "rita")
    elsewhere = sorted(url for url in asked if urlsplit(url).hostname not in ("127.0.0.1", "localhost"))
    assert elsewhere == []
    assert any("authorize" in url for url in asked)  # the provider's page was among them

"""The reviewer's inbox: pending reviews with case, author, age and versions, oldest first, filtered
by case id prefix and author, a page at a time."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from decisionflow_console.review_pages import INBOX_PAGE_SIZE
from tests.console.pages import edit_body
from tests.support.console import ConsoleUnderTest, screenshot
from tests.support.stack import T1042_BODY, start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


def test_inbox_lists_filters_and_pages(make_console: Callable[..., ConsoleUnderTest], page: Page) -> None:
    console = make_console()
    review = console.stack.review()
    arthur, sam = console.servers.as_static("arthur"), console.servers.as_static("sam")
    for number in range(INBOX_PAGE_SIZE + 1):
        review.StartReview(start_request(case_id=f"T-{2000 + number}"), timeout=10, metadata=arthur)
    review.StartReview(start_request(case_id="S-1"), timeout=10, metadata=sam)
    console.sign_in(page, "rita", groups=["reviewers", "authors"])

    page.goto(console.url("/inbox"))
    rows = page.locator("#inbox tbody tr")
    expect(rows).to_have_count(INBOX_PAGE_SIZE)
    expect(rows.first).to_contain_text("T-2000")
    expect(rows.first).to_contain_text("arthur")
    page.click("#next-page")
    expect(rows).to_have_count(2)
    expect(page.locator("#inbox")).to_contain_text("S-1")

    page.goto(console.url("/inbox"))
    page.fill("#author", "sam")
    page.click("text=Filter")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("S-1")
    page.goto(console.url("/inbox?case=T-201"))
    expect(rows).to_have_count(10)  # T-2010 … T-2019

    # An edit makes a second version of the case; the inbox shows the current one with its count.
    rows.first.get_by_role("link").click()
    first = page.locator("#operation-id").inner_text()
    edit_body(page, console, first, T1042_BODY + "\nEdited in the console.")
    page.goto(console.url("/inbox?case=T-2010"))
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td").nth(4)).to_have_text("2")
    expect(rows.first.locator("td").nth(5)).to_have_text("yes")
    page.goto(console.url("/inbox?case=T-20"))
    screenshot(page, "inbox")


def test_a_filter_the_orchestrator_refuses_is_said_at_its_field_in_the_form_that_fixes_it(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    review = console.stack.review()
    review.StartReview(start_request(case_id="T-3001"), timeout=10, metadata=console.servers.as_static("arthur"))
    console.sign_in(page, "rita", groups=["reviewers"])
    response = page.goto(console.url("/inbox?case=T+30"))
    assert response is not None and response.status == 400
    expect(page.locator("#case-problem")).to_contain_text("letters, digits")
    expect(page.locator("#case")).to_have_value("T 30")
    expect(page.locator("#case")).to_have_attribute("aria-describedby", "case-problem")
    expect(page.locator("#empty")).to_have_count(0)
    page.fill("#case", "T-30")
    page.click("text=Filter")
    expect(page.locator("#inbox tbody tr")).to_have_count(1)
    expect(page.locator("#case-problem")).to_have_count(0)

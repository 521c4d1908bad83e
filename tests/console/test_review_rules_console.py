"""Reviews under a rule in the console, in a real browser: the inbox shows each review's stage, its
approvals and who gave them, and its due time in the reader's time zone; a reviewer is listed only what
they may decide now; the proposal page of a review the person may not decide offers no Approve or
Decline, with a line saying why."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.console import ConsoleUnderTest, screenshot
from tests.support.stack import start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

RULES = """\
version = 1

[[actions.record_support_review.stages]]
name = "leads"
groups = ["support-leads"]
approvals = 2
due = "4h"

[[actions.record_support_review.stages]]
name = "finance"
groups = ["finance"]
"""


@pytest.fixture
def person(browser: Browser) -> Iterator[Callable[[], Page]]:
    """A fresh browser context per person (in Berlin's time zone), closed after the test."""
    contexts = []

    def open_page() -> Page:
        context = browser.new_context(timezone_id="Europe/Berlin")
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def test_the_inbox_shows_the_stage_and_a_person_outside_it_gets_no_buttons(
    make_console: Callable[..., ConsoleUnderTest], person: Callable[[], Page], tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    console = make_console(review_rules_file=rules)
    review = console.stack.review()
    started = review.StartReview(
        start_request(case_id="T-5001"), timeout=10, metadata=console.servers.as_static("arthur")
    )
    operation_id = started.proposal.operation_id

    rita = person()
    console.sign_in(rita, "rita", groups=["reviewers", "support-leads"])
    rita.goto(console.url("/inbox"))
    row = rita.locator("#inbox tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator(".stage")).to_have_text("Stage 1 of 2: leads")
    expect(row.locator(".approvals")).to_have_text("0 of 2 approvals")
    due = row.locator(".due time")
    expect(due).to_contain_text("CET")  # rewritten to the reader's zone; the UTC text kept in its title
    assert (due.get_attribute("title") or "").endswith("UTC")
    expect(row.locator(".escalated")).to_have_count(0)
    rita.goto(console.url(f"/proposals/{operation_id}"))
    expect(rita.locator("#review-progress .stage")).to_have_text("Stage 1 of 2: leads")
    rita.click("#approve")
    expect(rita.locator("#outcome")).to_have_attribute("data-outcome", "AWAITING_APPROVALS")
    expect(rita.locator("#review-progress .approvals")).to_have_text("1 of 2 approvals, by rita")
    rita.goto(console.url("/inbox"))
    expect(rita.locator("#inbox tbody tr")).to_have_count(0)  # voted: no longer rita's to decide

    lee = person()
    console.sign_in(lee, "lee", groups=["reviewers", "support-leads"])
    lee.goto(console.url("/inbox"))
    expect(lee.locator("#inbox tbody tr .approvals")).to_have_text("1 of 2 approvals, by rita")
    screenshot(lee, "inbox-under-a-rule")

    fay = person()
    console.sign_in(fay, "fay", groups=["reviewers", "finance"])
    fay.goto(console.url("/inbox"))
    expect(fay.locator("#inbox tbody tr")).to_have_count(0)  # the leads' stage: not fay's
    fay.goto(console.url(f"/proposals/{operation_id}"))
    expect(fay.locator("#review-progress .approvals")).to_have_text("1 of 2 approvals, by rita")
    expect(fay.locator("#why-not")).to_contain_text("Your vote does not count here")
    expect(fay.locator("#why-not")).to_contain_text("support-leads")
    expect(fay.locator("#approve")).to_have_count(0)
    expect(fay.locator("#decline")).to_have_count(0)
    screenshot(fay, "not-eligible")

    rita.goto(console.url(f"/proposals/{operation_id}"))
    expect(rita.locator("#why-not")).to_contain_text("you approved this stage already")
    expect(rita.locator("#approve")).to_have_count(0)
    assert console.stack.decisions() == 0

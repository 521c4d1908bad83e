"""Reviews under a rule in the console, in a real browser: the inbox shows each review's stage, its
approvals and who gave them, and its due time in the reader's time zone; a reviewer is listed only what
they may decide now; the proposal page lists every stage begun, who approved and declined each, and for
the stage being decided who may decide it, its due time and whether it was escalated; a review the person
may not decide, or one already decided, offers no Approve or Decline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from decisionflow_server.storage import db
from orchestrator.review_timer import ReviewTimer
from orchestrator.store import OrchestratorStore
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

# RULES with the finance stage due in 8 h and then open to the controllers too.
ESCALATING_FINANCE = RULES + 'due = "8h"\nescalate_to = ["controllers"]\n'


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
    expect(rita.locator("#stage-1 .name")).to_have_text("Stage 1 of 2: leads (being decided)")
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
    expect(fay.locator("#stage-1 .approvals")).to_have_text("1 of 2 approvals, by rita")
    expect(fay.locator("#why-not")).to_contain_text("Your vote does not count here")
    expect(fay.locator("#why-not")).to_contain_text("support-leads")
    expect(fay.locator("#approve")).to_have_count(0)
    expect(fay.locator("#decline")).to_have_count(0)
    screenshot(fay, "not-eligible")

    rita.goto(console.url(f"/proposals/{operation_id}"))
    expect(rita.locator("#why-not")).to_contain_text("you approved this stage already")
    expect(rita.locator("#approve")).to_have_count(0)
    assert console.stack.decisions() == 0


def test_the_proposal_page_lists_who_approved_at_each_stage_and_offers_nothing_once_decided(
    make_console: Callable[..., ConsoleUnderTest], person: Callable[[], Page], tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(ESCALATING_FINANCE, encoding="utf-8")
    now = [datetime.now(UTC).replace(microsecond=0)]
    console = make_console(review_rules_file=rules, orchestrator_clock=lambda: now[0])
    started = console.stack.review().StartReview(
        start_request(case_id="T-5002"), timeout=10, metadata=console.servers.as_static("arthur")
    )
    proposal = console.url(f"/proposals/{started.proposal.operation_id}")
    for name in ("rita", "lee"):
        lead = person()
        console.sign_in(lead, name, groups=["reviewers", "support-leads"])
        lead.goto(proposal)
        lead.click("#approve")
    expect(lead.locator("#review-progress .stage")).to_have_text("Stage 2 of 2: finance")

    fay = person()
    console.sign_in(fay, "fay", groups=["reviewers", "finance"])
    fay.goto(proposal)
    stages = fay.locator("#review-stages > li")
    expect(stages).to_have_count(2)
    leads, finance = fay.locator("#stage-1"), fay.locator("#stage-2")
    expect(leads.locator(".name")).to_have_text("Stage 1 of 2: leads")
    expect(leads.locator(".approvals")).to_have_text("2 of 2 approvals, by rita, lee")
    expect(leads.locator(".declines")).to_have_text("no declines")
    expect(leads.locator(".ended time")).to_contain_text("CET")
    expect(leads.locator(".eligible")).to_have_count(0)
    expect(finance.locator(".name")).to_have_text("Stage 2 of 2: finance (being decided)")
    expect(finance.locator(".approvals")).to_have_text("0 of 1 approvals")
    expect(finance.locator(".eligible")).to_have_text("decided by members of finance")
    expect(finance.locator(".due time")).to_contain_text("CET")  # the reader's zone, as the inbox shows it
    expect(finance.locator(".not-escalated")).to_have_text("not escalated")
    expect(finance.locator(".ended")).to_have_count(0)

    now[0] += timedelta(hours=9)  # an hour past the finance stage's due time
    engine = db.create_engine(console.stack.orchestrator_url)
    try:
        timer = ReviewTimer(OrchestratorStore(engine), lambda: now[0], batch=10)
        escalated = console.stack.loop.run(timer.run_once())  # the browser's own loop runs in this thread
    finally:
        engine.dispose()
    assert escalated.escalated == (started.proposal.operation_id,)
    fay.reload()
    expect(finance.locator(".eligible")).to_have_text("decided by members of controllers, finance")
    expect(finance.locator(".badge.escalated")).to_have_text("escalated")
    screenshot(fay, "review-stages")
    fay.click("#decline")
    expect(fay.locator("#outcome")).to_have_attribute("data-outcome", "DECLINED")

    for reader in (fay, lead):
        reader.goto(proposal)
        expect(reader.locator("#decided")).to_contain_text("Decided")
        expect(reader.locator("#approve")).to_have_count(0)
        expect(reader.locator("#decline")).to_have_count(0)
        finance = reader.locator("#stage-2")
        expect(finance.locator(".name")).to_have_text("Stage 2 of 2: finance")
        expect(finance.locator(".declines")).to_have_text("1 of 1 declines that end the review, by fay")
        expect(finance.locator(".escalated-at time")).to_contain_text("CET")
        expect(finance.locator(".ended time")).to_contain_text("CET")
    assert console.stack.decisions() == 1

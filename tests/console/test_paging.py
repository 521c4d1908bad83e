"""Paging the operator desk and the inbox: more rows than a page, walked forward and back.

Each page says the listing's total as the orchestrator counted it with the page ("rows 1–200 of
206"), first page and last alike. "Next" walks every row once and "previous" comes back to the same
rows.
The desk's Unknowns are seeded through the orchestrator's store (as the reconciler's volume tests
do); the inbox's proposals are started through the orchestrator.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from decisionflow_console.operator_pages import ROWS_PER_STATE
from decisionflow_console.paging import Position, paging
from decisionflow_console.review_pages import INBOX_PAGE_SIZE, summary
from tests.support.console import ConsoleUnderTest
from tests.support.seeding import seed_operations
from tests.support.stack import start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

TAGS = "".join(chr(0xE0000 + ord(c)) for c in " and also pay 9000 EUR")


def _operation_ids(page: Page, table: str) -> list[str]:
    cells = page.locator(f"{table} [data-operation-id]")
    return [cells.nth(i).get_attribute("data-operation-id") or "" for i in range(cells.count())]


def _cases(page: Page) -> list[str]:
    return page.locator("#inbox tbody tr td:first-child").all_inner_texts()


def test_the_desk_pages_every_unknown_with_the_total(make_console: Callable[..., ConsoleUnderTest], page: Page) -> None:
    console = make_console()
    total = ROWS_PER_STATE + 6
    seeded = seed_operations(console.stack.orchestrator_url, total, case_prefix="U")
    console.sign_in(page, "olga", groups=["operators"])

    page.goto(console.url("/operations"))
    unknown = page.locator("h2", has_text="Unknown")
    expect(unknown.locator(".count")).to_have_text(f"({total})")
    expect(page.locator("#rows-unknown")).to_have_text(f"rows 1–{ROWS_PER_STATE} of {total}, more on the next page.")
    first = _operation_ids(page, "#operations-unknown")
    assert len(first) == ROWS_PER_STATE
    expect(page.locator("#previous-unknown")).to_have_count(0)

    page.click("#next-unknown")
    expect(page.locator("#state")).to_have_value("unknown")  # the page of one state keeps it chosen
    expect(page.locator("h2", has_text="Unknown").locator(".count")).to_have_text(f"({total})")
    expect(page.locator("#rows-unknown")).to_have_text(f"rows {ROWS_PER_STATE + 1}–{total} of {total}, the last page.")
    second = _operation_ids(page, "#operations-unknown")
    expect(page.locator("#next-unknown")).to_have_count(0)
    # Every seeded Unknown once, oldest first, across the two pages.
    assert first + second == [s.operation_id for s in seeded]

    page.click("#previous-unknown")
    expect(page.locator("#rows-unknown")).to_contain_text(f"rows 1–{ROWS_PER_STATE} of {total}")
    assert _operation_ids(page, "#operations-unknown") == first


def test_the_inbox_pages_forward_and_back_with_the_count_and_a_summary(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    review = console.stack.review()
    arthur = console.servers.as_static("arthur")
    total = 2 * INBOX_PAGE_SIZE + 3
    cases = [f"T-{3000 + number}" for number in range(total)]
    for case_id in cases:
        review.StartReview(start_request(case_id=case_id), timeout=10, metadata=arthur)
    long_body = " ".join(f"word{n}" for n in range(40))
    hidden = "Refund 10 EUR to the customer." + TAGS + " Thanks."
    review.StartReview(start_request(case_id="S-long", body=long_body), timeout=10, metadata=arthur)
    review.StartReview(start_request(case_id="S-hidden", body=hidden), timeout=10, metadata=arthur)
    console.sign_in(page, "rita", groups=["reviewers"])

    page.goto(console.url("/inbox?case=T-"))
    count = page.locator("#inbox-count")
    expect(count).to_have_text(
        f"Waiting for a decision among these filters: rows 1–{INBOX_PAGE_SIZE} of {total}, more on the next page."
    )
    expect(page.locator("#previous-page")).to_have_count(0)
    walked = [_cases(page)]
    page.click("#next-page")
    expect(count).to_contain_text(f"rows {INBOX_PAGE_SIZE + 1}–{2 * INBOX_PAGE_SIZE} of {total}, more on the next page")
    walked.append(_cases(page))
    page.click("#next-page")
    expect(count).to_contain_text(f"rows {2 * INBOX_PAGE_SIZE + 1}–{total} of {total}, the last page.")
    expect(page.locator("#next-page")).to_have_count(0)
    walked.append(_cases(page))
    assert [case for shown in walked for case in shown] == cases  # every case once, oldest first

    page.click("#previous-page")
    expect(count).to_contain_text(f"rows {INBOX_PAGE_SIZE + 1}–{2 * INBOX_PAGE_SIZE} of {total}")
    assert _cases(page) == walked[1]
    assert "case=T-" in page.url  # the filter goes along
    page.click("#previous-page")
    expect(count).to_contain_text(f"rows 1–{INBOX_PAGE_SIZE} of {total}")
    assert _cases(page) == walked[0]
    expect(page.locator("#previous-page")).to_have_count(0)

    # The summary column: the first words, "…" when the body goes on, hidden characters marked.
    page.goto(console.url("/inbox?case=S-"))
    expect(page.locator("#inbox-count")).to_have_text("Waiting for a decision among these filters: 2.")
    expect(page.locator("#next-page")).to_have_count(0)
    rows = page.locator("#inbox tbody tr")
    long_row = rows.filter(has_text="S-long").locator("td.summary")
    expect(long_row).to_have_text(" ".join(f"word{n}" for n in range(12)) + "…")
    hidden_row = rows.filter(has_text="S-hidden").locator("td.summary")
    expect(hidden_row).to_contain_text("Refund 10 EUR to the customer.")
    expect(hidden_row.locator(".hidden-char")).to_contain_text("⟦22 tag characters:  and also pay 9000 EUR⟧")


def test_an_inbox_that_fills_one_page_exactly_offers_no_empty_next_page(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    review = console.stack.review()
    sam = console.servers.as_static("sam")
    for number in range(INBOX_PAGE_SIZE):
        review.StartReview(start_request(case_id=f"E-{number}"), timeout=10, metadata=sam)
    console.sign_in(page, "rita", groups=["reviewers"])
    page.goto(console.url("/inbox"))
    expect(page.locator("#inbox tbody tr")).to_have_count(INBOX_PAGE_SIZE)
    # The orchestrator hands a page token back with any full page; its total says no row follows.
    expect(page.locator("#next-page")).to_have_count(0)
    expect(page.locator("#inbox-count")).to_have_text(f"Waiting for a decision: {INBOX_PAGE_SIZE}.")


def test_the_summary_splits_only_at_spaces_and_line_breaks_so_other_spaces_are_kept_to_be_marked() -> None:
    assert summary("Refund\u00a010 EUR\nto the customer.") == "Refund\u00a010 EUR to the customer."
    assert summary("x" * 150) == "x" * 100 + "…"
    assert summary(" ".join("abcdefghijklmn")) == " ".join("abcdefghijkl") + "…"


def test_without_a_total_a_page_says_what_it_knows() -> None:
    # An orchestrator that does not count (an older one) leaves the total unset.
    at, later = Position("", ()), Position("t2", ("", "t1"))
    first = paging("/inbox", {}, at, rows=25, page_size=25, next_token="t1", more=True)
    assert (first.count, first.summary) == ("25+", "25+: rows 1–25 here, more on the next page.")
    last = paging("/inbox", {}, later, rows=3, page_size=25, next_token="", more=False)
    assert (last.count, last.summary) == ("53", "53: rows 51–53 here, the last page.")
    counted = paging("/inbox", {}, later, rows=3, page_size=25, next_token="", more=False, total=53)
    assert (counted.count, counted.summary) == ("53", "rows 51–53 of 53, the last page.")

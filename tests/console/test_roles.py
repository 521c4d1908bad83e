"""The orchestrator's role checks and four-eyes rule, met by people signed in to the console: the
console shows each refusal in words and decides nothing itself."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Browser, Page, expect

from tests.console.pages import start_case
from tests.support.console import ConsoleUnderTest, screenshot


def test_a_person_without_the_reviewer_role_is_refused_in_words(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    console.sign_in(page, "arthur", groups=["authors"])
    start_case(page, console, case_id="T-roles")
    expect(page.locator("#person")).to_have_text("Arthur")
    page.click("#approve")
    expect(page.locator("h1")).to_have_text("You need the reviewer role")
    expect(page.locator("#refusal")).to_contain_text("your account does not have the reviewer role")
    screenshot(page, "no-role")
    page.goto(console.url("/operations"))
    expect(page.locator("h1")).to_have_text("You need the operator role")
    assert console.stack.decisions() == 0


def test_four_eyes_refuses_the_author_and_records_the_other_reviewer(
    make_console: Callable[..., ConsoleUnderTest], browser: Browser, page: Page
) -> None:
    console = make_console(four_eyes=True)
    console.sign_in(page, "sam", groups=["authors", "reviewers"])
    operation_id = start_case(page, console, case_id="T-4eyes")
    page.click("#approve")
    expect(page.locator("h1")).to_have_text("You cannot decide your own proposal")
    expect(page.locator("section.refusal")).to_have_attribute("data-reason", "FOUR_EYES")
    screenshot(page, "four-eyes")
    assert console.stack.decisions() == 0

    other = browser.new_context()
    try:
        reviewer = other.new_page()
        console.sign_in(reviewer, "rita", groups=["reviewers"])
        reviewer.goto(console.url(f"/proposals/{operation_id}"))
        reviewer.click("#approve")
        expect(reviewer.locator("#outcome")).to_have_text("COMMITTED")
        reviewer.goto(console.url(f"/proposals/{operation_id}"))
        expect(reviewer.locator("#decided-by")).to_contain_text("rita")
    finally:
        other.close()
    assert console.stack.effects("T-4eyes") == 1


def test_the_operator_confirmation_pages_refuse_anyone_but_an_operator(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    # The POSTs are refused by the orchestrator; the pages that lead to them are refused the same way,
    # before a reviewer is asked to confirm what they may not do.
    console = make_console()
    console.sign_in(page, "rita", groups=["reviewers"])
    operation_id = "op-v1-" + "a" * 64
    for path in (f"/operations/{operation_id}/redrive", f"/operations/{operation_id}/settle"):
        response = page.goto(console.url(path))
        assert response is not None and response.status == 403, path
        expect(page.locator("h1")).to_have_text("You need the operator role")
    page.context.clear_cookies()
    console.sign_in(page, "olga", groups=["operators"])
    for path in (f"/operations/{operation_id}/redrive", f"/operations/{operation_id}/settle"):
        response = page.goto(console.url(path))
        assert response is not None and response.status == 200, path

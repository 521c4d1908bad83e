"""The orchestrator's role checks and four-eyes rule, met by people signed in to the console: the
console shows each refusal in words and decides nothing itself; its navigation offers only what the
roles the orchestrator grants (GetCaller, read once per session) allow."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx2
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from decisionflow.client import Role
from tests.console.pages import session_cookie, start_case
from tests.support.console import EVERY_ROLE, ConsoleUnderTest, screenshot
from tests.support.stack import start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

NAVIGATION = "nav[aria-label=main] a"
ORCHESTRATOR_ROLES = frozenset({Role.REVIEWER, Role.AUTHOR, Role.OPERATOR})
# Groups at the provider (tests.support.oidc.ROLE_MAP), the roles the orchestrator grants for them,
# and the links the console must show for those roles.
PEOPLE: list[tuple[str, list[str], frozenset[Role], list[str]]] = [
    ("reva", ["reviewers"], frozenset({Role.REVIEWER}), ["Inbox"]),
    ("aldo", ["authors"], frozenset({Role.AUTHOR}), ["Inbox", "Start a case"]),
    ("opal", ["operators"], frozenset({Role.OPERATOR}), ["Inbox", "Operator desk", "Relay", "Audit log"]),
    ("audra", ["auditors"], frozenset({Role.AUDITOR}), ["Audit log"]),
    (
        "evan",
        EVERY_ROLE,
        frozenset({Role.REVIEWER, Role.AUTHOR, Role.OPERATOR}),
        ["Inbox", "Start a case", "Operator desk", "Relay", "Audit log"],
    ),
    # Signed in at the provider, but in no group the orchestrator maps to a role: no link at all.
    ("vera", ["visitors"], frozenset(), []),
]


def test_a_person_without_the_reviewer_role_is_refused_in_words(
    make_console: Callable[..., ConsoleUnderTest], context: BrowserContext, page: Page
) -> None:
    console = make_console()
    console.sign_in(page, "arthur", groups=["authors"])
    operation_id = start_case(page, console, case_id="T-roles")
    expect(page.locator("#person")).to_have_text("Arthur")
    # An author is offered the edit, not the decision; a decision posted all the same is refused in words.
    expect(page.locator("#approve")).to_have_count(0)
    expect(page.locator("#edit")).to_have_count(1)
    token = console.session_of(context).csrf_token
    decided = httpx2.post(
        console.url("/decide"),
        data={"operation_id": operation_id, "decision": "approve", "csrf_token": token},
        cookies=session_cookie(context),
    )
    assert decided.status_code == 403
    assert "You need the reviewer role" in decided.text
    assert "your account does not have the reviewer role" in decided.text
    page.goto(console.url("/operations"))
    expect(page.locator("h1")).to_have_text("You need the operator role")
    expect(page.locator("#refusal")).to_contain_text("your account does not have the operator role")
    screenshot(page, "no-role")
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
        expect(reviewer.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
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
    started = console.stack.review().StartReview(
        start_request(case_id="T-confirm"), timeout=10, metadata=console.servers.as_static("arthur")
    )
    operation_id = started.proposal.operation_id
    console.sign_in(page, "rita", groups=["reviewers"])
    for path in (f"/operations/{operation_id}/redrive", f"/operations/{operation_id}/settle"):
        response = page.goto(console.url(path))
        assert response is not None and response.status == 403, path
        expect(page.locator("h1")).to_have_text("You need the operator role")
    page.context.clear_cookies()
    console.sign_in(page, "olga", groups=["operators"])
    for path in (f"/operations/{operation_id}/redrive", f"/operations/{operation_id}/settle"):
        response = page.goto(console.url(path))
        assert response is not None and response.status == 200, path
        # The page names the case, the operation id beside it.
        expect(page.locator("h1")).to_contain_text("case T-confirm")
        expect(page.locator("#operation-id")).to_have_text(operation_id)


def test_the_navigation_shows_exactly_the_links_the_roles_allow(
    make_console: Callable[..., ConsoleUnderTest], browser: Browser
) -> None:
    console = make_console()
    for subject, groups, roles, links in PEOPLE:
        context = browser.new_context()
        try:
            page = context.new_page()
            console.sign_in(page, subject, groups=groups)
            # The inbox (or its refusal), a page that asks the orchestrator nothing, and the desk (or its refusal).
            for path in ("/", "/start", "/operations"):
                page.goto(console.url(path))
                assert page.locator(NAVIGATION).all_inner_texts() == links, (subject, path)
            assert console.session_of(context).roles == roles, subject
            # A link left out is no permission: the desk still answers with the orchestrator's refusal.
            if Role.OPERATOR not in roles:
                expect(page.locator("h1")).to_have_text("You need the operator role")
        finally:
            context.close()


def test_the_roles_are_read_once_per_session_and_again_after_a_read_that_failed(
    make_console: Callable[..., ConsoleUnderTest], browser: Browser, page: Page
) -> None:
    console = make_console()
    stack = console.stack
    console.sign_in(page, "opal", groups=["operators"])
    assert page.locator(NAVIGATION).all_inner_texts() == ["Inbox", "Operator desk", "Relay", "Audit log"]
    port = stack.orchestrator_port
    stack.stop_orchestrator()
    # Kept in the session: with the orchestrator gone, a page that calls nothing still offers them.
    page.goto(console.url("/start"))
    assert page.locator(NAVIGATION).all_inner_texts() == ["Inbox", "Operator desk", "Relay", "Audit log"]

    other = browser.new_context()
    try:
        reviewer = other.new_page()
        console.sign_in(reviewer, "reva", groups=["reviewers"])
        reviewer.goto(console.url("/start"))
        # The orchestrator did not say: nothing is offered, and nothing is remembered.
        assert reviewer.locator(NAVIGATION).all_inner_texts() == []
        assert console.session_of(other).roles is None
        stack.start_orchestrator(
            security=console.servers.security,
            receiver_token=console.servers.tokens["walter"],
            address=f"127.0.0.1:{port}",
        )
        # A later request asks again (once the console's channel to it has reconnected).
        deadline = time.monotonic() + 30
        while not reviewer.locator(NAVIGATION).all_inner_texts():
            assert time.monotonic() < deadline, "the roles were not read again after the orchestrator came back"
            reviewer.wait_for_timeout(200)
            reviewer.goto(console.url("/start"))
        assert reviewer.locator(NAVIGATION).all_inner_texts() == ["Inbox"]
        assert console.session_of(other).roles == frozenset({Role.REVIEWER})
    finally:
        other.close()

"""Each person meets only what their roles let them use: signing in lands them on their role's page (or,
with no role, on a page that says what the roles are and whom to ask); every page answers 403 to
someone without its role, before any form; and no page offers an action or a link that would be refused.

The roles per page below are written out as the console's documentation states them (docs/console.md),
not read from the code under test."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx2
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from decisionflow.v1 import review_pb2
from tests.console.pages import session_cookie
from tests.support.audit import SIGNER, publish_log
from tests.support.console import ConsoleUnderTest, screenshot
from tests.support.stack import start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

REVIEWER, AUTHOR, OPERATOR, AUDITOR, NO_ROLE = "reviewer", "author", "operator", "auditor", "no role"
# Who signs in for each role, in which groups at the provider (tests.support.oidc.ROLE_MAP).
PEOPLE: dict[str, tuple[str, list[str]]] = {
    REVIEWER: ("rita", ["reviewers"]),
    AUTHOR: ("arthur", ["authors"]),
    OPERATOR: ("olga", ["operators"]),
    AUDITOR: ("audrey", ["auditors"]),
    NO_ROLE: ("vera", ["visitors"]),
}
READERS = {REVIEWER, AUTHOR, OPERATOR}
LOG_READERS = {AUDITOR, OPERATOR}
OP = "{operation_id}"
# Each page a person opens by its address, and the roles it serves (an answer of 200, or the 303 of
# /cases to the proposal); anyone else gets 403.
PAGES: list[tuple[str, set[str]]] = [
    ("/inbox", READERS),
    ("/cases?case_id=T-matrix", READERS),
    (f"/proposals/{OP}", READERS),
    (f"/proposals/{OP}/edit", {AUTHOR}),
    ("/start", {AUTHOR}),
    ("/operations", {OPERATOR}),
    (f"/operations/{OP}", {OPERATOR}),
    (f"/operations/{OP}/redrive", {OPERATOR}),
    (f"/operations/{OP}/settle", {OPERATOR}),
    ("/relay", {OPERATOR}),
    ("/audit", LOG_READERS),
    (f"/audit/{OP}", LOG_READERS),
    (f"/audit/{OP}/bundle", LOG_READERS),
]
# Each form a person posts, and the roles it serves: to anyone else, 403 and nothing done.
FORMS: list[tuple[str, dict[str, str], set[str]]] = [
    ("/start", {"case_id": "T-posted", "body": "x", "policy_version_label": "1"}, {AUTHOR}),
    ("/edit", {"expected_operation_id": OP, "body": "changed", "policy_version_label": "1"}, {AUTHOR}),
    ("/decide", {"operation_id": OP, "decision": "approve"}, {REVIEWER}),
    (f"/operations/{OP}/redrive", {}, {OPERATOR}),
    (f"/operations/{OP}/settle", {"status": "not_found", "consistency": "strong", "confirmed": "yes"}, {OPERATOR}),
]
# Where each role lands after signing in, and that page's heading.
LANDINGS: list[tuple[str, list[str], str, str]] = [
    ("rita", ["reviewers"], "/inbox", "Inbox"),
    ("arthur", ["authors"], "/start", "Start a case"),
    ("olga", ["operators"], "/operations", "Operator desk"),
    ("audrey", ["auditors"], "/audit", "Audit log"),
    # Several roles: the first of reviewer, operator, author, auditor.
    ("sam", ["authors", "reviewers"], "/inbox", "Inbox"),
    ("opal", ["operators", "auditors"], "/operations", "Operator desk"),
    ("vera", ["visitors"], "/", "Your account has no role here yet"),
]


@pytest.mark.parametrize(("subject", "groups", "path", "heading"), LANDINGS, ids=[row[0] for row in LANDINGS])
def test_signing_in_lands_each_role_on_its_own_page(
    make_console: Callable[..., ConsoleUnderTest], page: Page, subject: str, groups: list[str], path: str, heading: str
) -> None:
    console = make_console()
    console.sign_in(page, subject, groups=groups)
    assert page.url == console.url(path)
    expect(page.locator("h1")).to_have_text(heading)
    response = page.goto(console.url("/"))
    assert response is not None and response.status == 200 and page.url == console.url(path)
    if path == "/":
        # Nothing to open yet: the page says which group they are in, what each role does and whom to ask.
        expect(page.locator("#no-role")).to_contain_text("visitors")
        expect(page.locator("#roles")).to_contain_text("approves or declines")
        expect(page.locator("#ask")).to_contain_text("identity provider")
        assert page.locator("nav[aria-label=main] a").count() == 0
        screenshot(page, "no-role-yet")


def _sign_in(console: ConsoleUnderTest, browser: Browser, subject: str, groups: list[str]) -> BrowserContext:
    context = browser.new_context()
    console.sign_in(context.new_page(), subject, groups=groups)
    return context


def test_every_page_and_form_answers_403_to_each_role_without_it_and_offers_nothing_refused(
    make_console: Callable[..., ConsoleUnderTest], browser: Browser
) -> None:
    console = make_console()
    started = console.stack.review().StartReview(
        start_request(case_id="T-matrix"), timeout=10, metadata=console.servers.as_static("arthur")
    )
    operation_id = started.proposal.operation_id
    publish_log(console.stack.orchestrator_url, SIGNER)  # its proposal leaf, under a signed checkpoint

    wrong: list[str] = []
    for role, (subject, groups) in PEOPLE.items():
        context = _sign_in(console, browser, subject, groups)
        cookies = session_cookie(context)
        try:
            with httpx2.Client(base_url=console.base, cookies=cookies) as client:
                for template, roles in PAGES:
                    path = template.replace(OP, operation_id)
                    status = client.get(path).status_code
                    expected = (303 if path.startswith("/cases") else 200) if role in roles else 403
                    if status != expected:
                        wrong.append(f"{role} GET {template}: {status}, expected {expected}")
                for template, fields, roles in FORMS:
                    if role in roles:
                        continue  # posted by the person it serves, it would act
                    data = {k: v.replace(OP, operation_id) for k, v in fields.items()}
                    data["csrf_token"] = console.session_of(context).csrf_token
                    status = client.post(template.replace(OP, operation_id), data=data).status_code
                    if status != 403:
                        wrong.append(f"{role} POST {template}: {status}, expected 403")
                wrong.extend(_refused_links(client, role, operation_id))
        finally:
            context.close()
    assert wrong == [], "\n".join(wrong)
    # Nothing a refused form asked for was done: no case started, no edit, no decision, no effect.
    pending = console.stack.review().ListPendingReviews(
        review_pb2.ListPendingReviewsRequest(page_size=10), timeout=10, metadata=console.servers.as_static("rita")
    )
    assert [entry.proposal.operation_id for entry in pending.entries] == [operation_id]
    assert console.stack.decisions() == 0 and console.stack.effects() == 0


def _refused_links(client: httpx2.Client, role: str, operation_id: str) -> list[str]:
    """Every link and action on each page role may open that would answer 403 to them."""
    found: list[str] = []
    for template, _ in PAGES:
        path = template.replace(OP, operation_id)
        page = client.get(path)
        if page.status_code != 200 or "text/html" not in page.headers.get("content-type", ""):
            continue
        for href in sorted(set(re.findall(r'href="(/[^"#]*)"', page.text))):
            if href.startswith(("/static/", "/favicon", "/login")) or href == "/":
                continue
            status = client.get(href.replace("&amp;", "&")).status_code
            if status == 403:
                found.append(f"{role}: {path} links to {href}, which answers 403")
        for action in ("approve", "decline"):
            if f'id="{action}"' in page.text and role != REVIEWER:
                found.append(f"{role}: {path} offers {action}")
        if 'id="edit"' in page.text and role != AUTHOR:
            found.append(f"{role}: {path} offers edit")
    return found

"""Web security in a real browser: hostile proposal text renders as inert text, a forged form is
refused and changes nothing, every response carries the strict headers, and no token reaches a
page or a URL."""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from decisionflow_console.web import CONTENT_SECURITY_POLICY, MAX_FORM_BYTES
from tests.console.pages import session_cookie, start_case
from tests.support.console import ConsoleUnderTest, screenshot

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

HOSTILE = (
    "<script>document.title='owned'</script><img src=x onerror=\"document.title='owned'\">\n"
    "</pre><b>bold?</b> {{ 7*7 }} &amp; &lt;\n"
    "\u202egnp.exe — שלום עולם — مرحبا بالعالم\n" + "x" * 20_000 + "\nend"
)


def test_hostile_proposal_text_renders_as_text(make_console: Callable[..., ConsoleUnderTest], page: Page) -> None:
    console = make_console()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    console.sign_in(page, "ana")
    start_case(page, console, case_id="T-hostile", body=HOSTILE)
    # Browsers send a textarea's line breaks as CRLF; the proposal keeps LF, as its identity does.
    # The direction override is shown where it is, not obeyed.
    assert page.locator("#body").inner_text() == HOSTILE.replace("\u202e", "⟦U+202E⟧")
    expect(page.locator("#body .hidden-char")).to_have_count(1)
    assert page.title() != "owned"
    assert page.locator("main script, main img, main b").count() == 0
    assert dialogs == []
    # The long line wraps inside its box instead of widening the page.
    width = page.locator("#body").bounding_box()
    assert width is not None and width["width"] <= 1200
    screenshot(page, "hostile")


def test_a_form_larger_than_any_request_is_refused_before_the_orchestrator(
    make_console: Callable[..., ConsoleUnderTest], page: Page
) -> None:
    console = make_console()
    stack = console.stack
    console.sign_in(page, "ana")
    page.goto(console.url("/start"))
    page.fill("#case_id", "T-huge")
    page.fill("#body", "a" * MAX_FORM_BYTES)  # 1 MiB of text
    page.fill("[name=policy_version_label]", "2026-10")
    page.click("#start")
    expect(page.locator("h1")).to_have_text("Too large")
    # 100 KiB gets through the console; the orchestrator's own limit refuses it, in words.
    page.goto(console.url("/start"))
    page.fill("#case_id", "T-huge")
    page.fill("#body", "b" * 100 * 1024)
    page.fill("[name=policy_version_label]", "2026-10")
    page.click("#start")
    expect(page.locator("#problem-body")).to_contain_text("draft: longer than")
    assert stack.decisions() == 0
    page.goto(console.url("/cases?case_id=T-huge"))
    expect(page.locator("h1")).to_have_text("Not found")


def test_a_forged_form_is_refused_and_decides_nothing(
    make_console: Callable[..., ConsoleUnderTest],
    context: BrowserContext,
    page: Page,
) -> None:
    console = make_console()
    stack = console.stack
    console.sign_in(page, "ana")
    operation_id = start_case(page, console, case_id="T-forged")
    # Another site's page posting to the console: the SameSite cookie stays home, the token is absent.
    attacker = context.new_page()
    attacker.set_content(
        f'<form method="post" action="{console.url("/decide")}">'
        f'<input name="operation_id" value="{operation_id}"><input name="decision" value="approve">'
        '<button id="go">win a prize</button></form>'
    )
    attacker.click("#go")
    expect(attacker.locator("h1")).to_have_text("Form refused")
    # Even with the session cookie itself, a post without the form's token (or with another) is refused.
    for token in ({}, {"csrf_token": "not-the-token"}):
        response = httpx2.post(
            console.url("/decide"),
            data={"operation_id": operation_id, "decision": "approve", **token},
            cookies=session_cookie(context),
        )
        assert response.status_code == 403
        assert "Form refused" in response.text
    assert stack.decisions() == 0
    expect(page.locator("#state")).to_have_attribute("data-state", "PENDING_REVIEW")


def test_headers_cookie_and_no_token_in_pages_or_urls(
    make_console: Callable[..., ConsoleUnderTest], context: BrowserContext, page: Page
) -> None:
    console = make_console()
    seen_urls: list[str] = []
    page.on("request", lambda request: seen_urls.append(request.url))
    console.sign_in(page, "ana")
    start_case(page, console, case_id="T-headers")
    [cookie] = [c for c in context.cookies() if c["name"] == "decisionflow_console_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    access_token = console.session_of(context).access_token
    assert access_token
    assert access_token not in page.content()
    assert not [url for url in seen_urls if access_token in url or "access_token" in url]
    for path in ("/", "/healthz", "/static/console.css", "/proposals/op-v1-none"):
        response = httpx2.get(console.url(path), cookies={cookie["name"]: cookie["value"]})
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    # Sign-out ends the session on the server: the old cookie opens nothing any more.
    page.click("text=Sign out")
    expect(page.locator("h1")).to_have_text("Signed out")
    response = httpx2.get(console.url("/start"), cookies={cookie["name"]: cookie["value"]})
    assert response.status_code == 303 and response.headers["location"].startswith("/login")

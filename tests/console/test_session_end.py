"""A session ends when its access token expires. A form sent after that is not a forgery: the page says
the session ended and that nothing was done, signs the person in again and brings them back to the
page the form came from, where the decision is sent again and recorded once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import httpx2
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.console.pages import session_cookie
from tests.support.console import ConsoleUnderTest
from tests.support.oidc import AUDIENCE
from tests.support.stack import start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

# Long enough to sign in and open a page on a loaded machine; the test moves the console's clock past it.
TOKEN_LIFETIME = timedelta(seconds=300)


class MovableClock:
    """The wall clock, moved ahead by what a test sets: the console's sessions read it."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


@pytest.fixture
def trial_identity() -> Iterator[TrialIdentityProvider]:
    """The trial provider, issuing access tokens that expire after TOKEN_LIFETIME."""
    from decisionflow_demo.trial_identity import TrialIdentityProvider

    with TrialIdentityProvider(AUDIENCE, token_lifetime=TOKEN_LIFETIME) as provider:
        yield provider


def _move_past_the_token(clock: MovableClock, console: ConsoleUnderTest, context: BrowserContext) -> None:
    cookie = next(iter(session_cookie(context).values()))
    assert console.sessions.find(cookie) is not None
    clock.ahead = TOKEN_LIFETIME.total_seconds() + 1
    assert console.sessions.find(cookie) is None, "the session outlived its access token"


def test_an_approve_after_the_token_expired_signs_in_again_and_returns_to_the_proposal(
    make_console: Callable[..., ConsoleUnderTest], context: BrowserContext, page: Page
) -> None:
    clock = MovableClock()
    console = make_console(clock=clock)
    stack = console.stack
    started = stack.review().StartReview(
        start_request(case_id="T-ended"), timeout=10, metadata=console.servers.as_static("arthur")
    )
    operation_id = started.proposal.operation_id
    console.sign_in(page, "rita", groups=["reviewers"])
    page.goto(console.url(f"/proposals/{operation_id}"))
    expect(page.locator("#approve")).to_be_visible()
    _move_past_the_token(clock, console, context)

    page.click("#approve")
    expect(page.locator("h1")).to_have_text("Your session has ended")
    expect(page.locator(".words")).to_contain_text("nothing was done")
    assert "forged" not in page.content()
    assert stack.decisions() == 0

    clock.ahead = 0  # back to the time the provider issues the next token at
    page.click("#next")  # Sign in again
    page.get_by_placeholder("sub").fill("rita")
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(console.url(f"/proposals/{operation_id}"))
    expect(page.locator("#state")).to_have_attribute("data-state", "PENDING_REVIEW")
    page.click("#approve")
    expect(page.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
    assert stack.decisions() == 1 and stack.effects("T-ended") == 1


def test_each_form_from_an_ended_session_leads_back_to_the_page_it_was_sent_from(
    make_console: Callable[..., ConsoleUnderTest],
) -> None:
    console = make_console()
    operation_id = "op-v1-" + "a" * 64
    forms = [
        ("/decide", {"operation_id": operation_id, "decision": "approve"}, f"/proposals/{operation_id}"),
        ("/edit", {"expected_operation_id": operation_id}, f"/proposals/{operation_id}/edit"),
        ("/start", {"case_id": "T-late"}, "/start"),
        (f"/operations/{operation_id}/redrive", {}, f"/operations/{operation_id}/redrive"),
        (f"/operations/{operation_id}/settle", {}, f"/operations/{operation_id}/settle"),
        ("/signout", {}, "/"),
        # Not an operation id: the way back is the console's root, never a path built from it.
        ("/decide", {"operation_id": "//elsewhere.example", "decision": "approve"}, "/"),
    ]
    for path, fields, back in forms:
        # The token of a session the console no longer holds, and no session cookie.
        answer = httpx2.post(console.url(path), data={**fields, "csrf_token": "token-of-an-ended-session"})
        assert answer.status_code == 401, path
        assert "Your session has ended" in answer.text
        assert f'href="/login?{urlencode({"next": back})}"' in answer.text, path
    assert console.stack.decisions() == 0

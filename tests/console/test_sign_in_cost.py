"""An anonymous sign-in costs the console nothing it keeps: against a console process before the trial
OpenID provider, ``GET /login`` answers with the redirect and a signed sign-in cookie and starts no
session (the console's session gauge stays 0), a sign-in finished at the provider still ends signed in
with the inbox served, and a flood of sign-ins from one address is answered 429 past its budget while
another address is served."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from decisionflow_console.sessions import COOKIE_NAME
from decisionflow_console.signin import CALLBACK_PATH, SIGN_IN_COOKIE
from tests.support.console_process import console_process

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

SESSIONS = "decisionflow_console_sessions"
ANONYMOUS_SIGN_INS = 50
BUDGET = 10


def test_an_anonymous_sign_in_keeps_no_session_and_signing_in_still_works(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    # The budget leaves room for the reviewer's own sign-in after the anonymous ones, however fast they ran.
    budget = ANONYMOUS_SIGN_INS + 1
    with console_process(tmp_path, trial_identity, "--sign-ins-per-minute", str(budget)) as console:
        anonymous = console.client()
        for _ in range(ANONYMOUS_SIGN_INS):
            started = anonymous.get("/login")
            assert started.status_code == 302
            assert started.headers["location"].startswith(trial_identity.issuer)
            assert COOKIE_NAME not in started.cookies
            sign_in_cookie = next(c for c in started.cookies.jar if c.name == SIGN_IN_COOKIE)
            assert sign_in_cookie.path == CALLBACK_PATH
        assert console.metric(SESSIONS) == 0
        # A callback without the cookie that /login set is refused, and starts nothing either.
        forged = console.client().get(CALLBACK_PATH + "?code=x&state=y")
        assert forged.status_code == 400 and "Sign-in expired" in forged.text
        assert console.metric(SESSIONS) == 0

        reviewer = console.signed_in("rita", ["reviewers"])
        assert console.metric(SESSIONS) == 1
        inbox = reviewer.get("/inbox")
        assert inbox.status_code == 200 and 'id="person"' in inbox.text
        assert SIGN_IN_COOKIE not in reviewer.cookies  # forgotten once the sign-in is answered


def test_sign_ins_past_an_addresss_budget_are_refused_while_another_address_is_served(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    with console_process(tmp_path, trial_identity, "--sign-ins-per-minute", str(BUDGET)) as console:
        flooding = console.client()
        answers = [flooding.get("/login") for _ in range(3 * BUDGET)]
        codes = [answer.status_code for answer in answers]
        assert codes[:BUDGET] == [302] * BUDGET
        refused = [answer for answer in answers[BUDGET:] if answer.status_code == 429]
        # The bucket refills at BUDGET a minute: a slow machine may earn one more sign-in during the flood.
        assert len(refused) >= 2 * BUDGET - 1, codes
        assert int(refused[-1].headers["retry-after"]) >= 1
        assert "Too many sign-ins" in refused[-1].text
        other = console.client(local_address="127.0.0.2").get("/login")
        assert other.status_code == 302
    refusals = [line for line in console.log_lines() if line.get("event") == "http_request" and line["code"] == 429]
    assert len(refusals) == len(refused)

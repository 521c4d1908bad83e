"""Cross-site request forgery: every POST form carries its session's CSRF token, and a POST is
served only when the token it carries equals the session's (compared in constant time).

The session cookie is SameSite=Lax, which already keeps it off most cross-site POSTs; the token
is the second, independent lock (an old browser, a same-site subdomain, a misconfigured proxy).
"""

from __future__ import annotations

import hmac

from decisionflow_console.sessions import Session

FIELD = "csrf_token"


class CsrfRefused(Exception):
    """A POST came without its session's CSRF token (or with another): nothing was done."""


def check(session: Session | None, submitted: object) -> Session:
    """Return the session when submitted is its CSRF token; raise CsrfRefused otherwise."""
    if session is None or not isinstance(submitted, str) or not submitted:
        raise CsrfRefused
    if not hmac.compare_digest(session.csrf_token.encode(), submitted.encode()):
        raise CsrfRefused
    return session

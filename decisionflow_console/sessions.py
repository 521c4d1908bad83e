"""Server-side sessions: the browser holds only a signed session id; the person, their access token
and their CSRF token stay in this process's memory and end at the session's expiry.

A session exists only once the provider has answered a sign-in: until then the sign-in's state is in
a signed cookie (decisionflow_console.signin), and the console keeps nothing for it. Each
sign-in starts a session under a new id, so an id seen before sign-in is never the id of a signed-in
session (no fixation). A session ends at the earlier of the access token's expiry and the configured
lifetime, or at sign-out. Sessions are not shared between console processes: run one, or pin
browsers to one with the load balancer.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from itsdangerous import BadSignature, Signer

from decisionflow.vocabulary import Role

COOKIE_NAME = "decisionflow_console_session"
# Sessions kept at most; beyond it the oldest are dropped (each one is a few hundred bytes).
MAX_SESSIONS = 100_000


@dataclass(frozen=True, slots=True)
class Person:
    """Who signed in, as the provider's ID token says: subject, a name to show, and their groups."""

    subject: str
    name: str
    groups: tuple[str, ...]


@dataclass(slots=True)
class Session:
    """One signed-in browser's session. access_token is never rendered, logged or put in a URL."""

    session_id: str
    csrf_token: str
    expires_at: float
    person: Person | None = None
    access_token: str | None = None  # None once the session has ended
    # The roles the orchestrator grants the person (GetCaller), read on the session's first request
    # (decisionflow_console.navigation); None until that read has succeeded.
    roles: frozenset[Role] | None = None

    @property
    def signed_in(self) -> bool:
        """True while the person and their token are held (until the session ends)."""
        return self.person is not None and self.access_token is not None


class SessionStore:
    """Sessions by id, each ending at its expiry; cookies carry the id signed with the session key."""

    def __init__(self, key: bytes, lifetime_seconds: float, *, clock: Callable[[], float] = time.time) -> None:
        self._signer = Signer(key, salt="decisionflow-console-session")
        self._lifetime = lifetime_seconds
        self._clock = clock
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def cookie_value(self, session: Session) -> str:
        """Return the cookie that names session: its id, signed."""
        return self._signer.sign(session.session_id).decode()

    def find(self, cookie: str | None) -> Session | None:
        """Return the live session the cookie names; None for no cookie, a bad signature or an ended session."""
        if not cookie:
            return None
        try:
            session_id = self._signer.unsign(cookie).decode()
        except (BadSignature, UnicodeDecodeError):
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if session.expires_at <= self._clock():
            del self._sessions[session_id]
            return None
        return session

    def sign_in(self, person: Person, access_token: str, token_expires_at: float | None) -> Session:
        """Return a new signed-in session under a new id, ending when the token does (or at the
        configured lifetime, if sooner)."""
        expires_at = self._clock() + self._lifetime
        if token_expires_at is not None:
            expires_at = min(expires_at, token_expires_at)
        return self._add(Session(_new_id(), _new_id(), expires_at, person=person, access_token=access_token))

    def end(self, session: Session) -> None:
        """End session now (sign-out); its cookie names nothing from here on."""
        self._sessions.pop(session.session_id, None)
        session.access_token = None

    def _add(self, session: Session) -> Session:
        self._drop_ended()
        while len(self._sessions) >= MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))  # the oldest: dicts keep insertion order
        self._sessions[session.session_id] = session
        return session

    def _drop_ended(self) -> None:
        now = self._clock()
        for session_id in [sid for sid, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[session_id]


def _new_id() -> str:
    return secrets.token_urlsafe(32)

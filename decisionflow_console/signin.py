"""Sign-in with OpenID Connect (authorization code with PKCE S256, through Authlib) and sign-out.

``/login`` keeps nothing on the server: within the address's budget (``--sign-ins-per-minute``,
decisionflow_console.sign_in_budget), it puts the sign-in's state, nonce and PKCE verifier
in a cookie signed with the session key, timestamped, HttpOnly and sent only to ``/auth/callback``,
and sends the browser to the provider. ``/auth/callback`` accepts that cookie for SIGN_IN_SECONDS,
checks the state, exchanges the code (the verifier proves this console asked for it), verifies the ID
token (signature by the issuer's keys, issuer, audience, expiry, nonce) and only then starts a
server-side session, under a new id. The access token stays in the session, in memory: the browser
only ever holds the session cookie. The sign-in cookie is signed, not encrypted: the browser that
started the sign-in can read its own verifier, as it could with Starlette's cookie sessions that
Authlib's documentation pairs it with; it cannot change it, nor use it past SIGN_IN_SECONDS, and the
provider accepts each code once.
"""

from __future__ import annotations

import time
from typing import Any

import httpx2
from authlib.integrations.starlette_client import OAuth, OAuthError
from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from decisionflow_console.config import ConsoleConfig
from decisionflow_console.pages import Pages
from decisionflow_console.posts import posted_form
from decisionflow_console.sessions import COOKIE_NAME, Person, Session, SessionStore
from decisionflow_console.sign_in_budget import SignInBudget
from decisionflow_console.web import current_session

CALLBACK_PATH = "/auth/callback"
SIGN_IN_COOKIE = "decisionflow_console_sign_in"
# Long enough to sign in at the provider; the cookie is refused after it.
SIGN_IN_SECONDS = 600
_PROVIDER = "provider"
_NEXT = "next_path"


class SignIn:
    """The sign-in, callback and sign-out endpoints, bound to one provider and one session store."""

    def __init__(self, config: ConsoleConfig, store: SessionStore, pages: Pages, origin: str) -> None:
        self._store = store
        self._budget = SignInBudget(config.sign_ins_per_minute)
        self._sign_in_state = URLSafeTimedSerializer(config.session_key, salt="decisionflow-console-sign-in")
        self._pages = pages
        self._origin = origin
        self._secure_cookie = origin.startswith("https://")
        self._groups_claim = config.oidc_groups_claim
        client_kwargs: dict[str, Any] = {
            "scope": config.oidc_scopes,
            "code_challenge_method": "S256",
            # Authlib opens an HTTP client for every authorization URL, even one it only builds; each
            # would load the CA bundle again (66 ms of the 70 ms a /login took): load it once.
            "verify": httpx2.create_ssl_context(),
        }
        if config.oidc_client_secret is None:
            # A public client: PKCE is its proof.
            client_kwargs["token_endpoint_auth_method"] = "none"  # noqa: S105 (a method name, not a secret)
        self._oauth = OAuth()
        self._oauth.register(
            _PROVIDER,
            client_id=config.oidc_client_id,
            client_secret=config.oidc_client_secret,
            server_metadata_url=f"{config.oidc_issuer}/.well-known/openid-configuration",
            client_kwargs=client_kwargs,
        )

    @property
    def _client(self) -> Any:
        return self._oauth.create_client(_PROVIDER)

    async def login(self, request: Request) -> Response:
        """Start a sign-in within the address's budget (else 429) and send the browser to the provider;
        nothing is kept on the server."""
        address = request.client.host if request.client is not None else ""
        wait = self._budget.admit(address)
        if wait:
            refused = self._pages.message(
                request,
                429,
                "Too many sign-ins",
                f"Too many sign-ins were started from your address. Try again in {wait} s.",
            )
            refused.headers["retry-after"] = str(wait)
            return refused
        state: dict[str, Any] = {_NEXT: local_path(request.query_params.get("next"))}
        request.scope["session"] = state  # where Authlib keeps the state, nonce and verifier
        try:
            response: Response = await self._client.authorize_redirect(request, self._origin + CALLBACK_PATH)
        except Exception:  # the provider's metadata could not be read: say so, without its internals
            return self._pages.message(
                request, 503, "Sign-in is unavailable", "The identity provider did not answer. Try again in a moment."
            )
        response.set_cookie(
            SIGN_IN_COOKIE,
            self._sign_in_state.dumps(state),
            max_age=SIGN_IN_SECONDS,
            path=CALLBACK_PATH,
            secure=self._secure_cookie,
            httponly=True,
            samesite="lax",  # sent on the provider's redirect back, a top-level GET
        )
        return response

    async def callback(self, request: Request) -> Response:
        """Finish a sign-in: verify the provider's answer and start the signed-in session."""
        state = self._started_sign_in(request)
        if state is None:
            words = "This sign-in was not started here or took too long. Sign in again."
            return self._refused(request, "Sign-in expired", words)
        request.scope["session"] = state
        try:
            token = await self._client.authorize_access_token(request)
        except OAuthError as error:
            words = f"The identity provider refused the sign-in ({error.error})."
            return self._refused(request, "Sign-in failed", words)
        claims = token.get("userinfo") or {}
        access_token = token.get("access_token")
        if not claims.get("sub") or not isinstance(access_token, str):
            return self._refused(request, "Sign-in failed", "The identity provider gave no subject or no access token.")
        previous = current_session(request)
        if previous is not None:
            self._store.end(previous)  # one browser, one session: signing in again ends the one before
        expires_at = token.get("expires_at")
        signed_in = self._store.sign_in(
            self._person(claims),
            access_token,
            float(expires_at) if isinstance(expires_at, int | float) else None,
        )
        response = RedirectResponse(str(state.get(_NEXT) or "/"), status_code=303)
        self._set_cookie(response, signed_in)
        return self._finished(response)

    def _started_sign_in(self, request: Request) -> dict[str, Any] | None:
        """The state of the sign-in this browser started here in the last SIGN_IN_SECONDS, or None."""
        cookie = request.cookies.get(SIGN_IN_COOKIE)
        if not cookie:
            return None
        try:
            state = self._sign_in_state.loads(cookie, max_age=SIGN_IN_SECONDS)
        except BadSignature:  # also an expired one (SignatureExpired)
            return None
        return state if isinstance(state, dict) else None

    def _refused(self, request: Request, title: str, words: str) -> Response:
        return self._finished(self._pages.message(request, 400, title, words))

    def _finished(self, response: Response) -> Response:
        """The response, telling the browser to forget the sign-in cookie (a sign-in is answered once)."""
        response.delete_cookie(
            SIGN_IN_COOKIE, path=CALLBACK_PATH, secure=self._secure_cookie, httponly=True, samesite="lax"
        )
        return response

    async def signout(self, request: Request) -> Response:
        """End the session (a POST carrying its CSRF token) and forget the cookie."""
        checked = await posted_form(self._pages, request, current_session(request))
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        self._store.end(session)
        request.scope["decisionflow_console.session"] = None
        response = self._pages.message(request, 200, "Signed out", "You are signed out of the console.")
        response.delete_cookie(COOKIE_NAME, path="/", secure=self._secure_cookie, httponly=True, samesite="lax")
        return response

    def _person(self, claims: dict[str, Any]) -> Person:
        subject = str(claims["sub"])
        name = claims.get("name") or claims.get("email") or subject
        groups = claims.get(self._groups_claim) or ()
        if isinstance(groups, str):
            groups = (groups,)
        return Person(subject, str(name), tuple(str(g) for g in groups))

    def _set_cookie(self, response: Response, session: Session) -> None:
        response.set_cookie(
            COOKIE_NAME,
            self._store.cookie_value(session),
            max_age=max(1, int(session.expires_at - time.time())),
            path="/",
            secure=self._secure_cookie,
            httponly=True,
            samesite="lax",
        )


def local_path(value: str | None) -> str:
    """Return value when it is a path on this console, else "/": a sign-in never ends on another site."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"

"""A trial OpenID Connect provider, for trying decisionflow on one machine and for its tests only:
anyone who can reach it signs in as anyone, and its keys live in memory. Never use it in production.

It is oidc-provider-mock (a Flask app) with one change: its access tokens, opaque by default, are
RS256 JWTs that the services verify like any provider's (``decisionflow_server.runtime.auth``), with the claims
iss, aud, sub, exp, iat, groups and email, signed with the provider's key and naming it by kid.
It listens on 127.0.0.1 only, on a thread of this process.

    with TrialIdentityProvider(audience="decisionflow") as provider:
        provider.set_user("rita", {"groups": ["reviewers"], "email": "rita@example.com"})
        token = provider.access_token("rita")   # the authorization code flow, over HTTP
        # services started with --oidc-issuer {provider.issuer} --oidc-audience decisionflow
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import flask
import jinja2
import jwt
import werkzeug.serving

with warnings.catch_warnings():
    # The mock imports parts of Authlib that announce their own deprecation on import: kept quiet,
    # also under a warnings-as-errors filter (record=True alone keeps the filters, so "error" raised).
    # authlib.deprecate puts an "always" filter first when it is imported: import it, then go before it.
    import authlib.deprecate  # noqa: F401

    warnings.simplefilter("ignore", DeprecationWarning)
    import oidc_provider_mock
    from authlib import jose

logger = logging.getLogger("decisionflow.trial_identity")

ALGORITHM = "RS256"
# Any redirect URI is accepted by the mock; the code is read from the redirect, never followed.
_REDIRECT_URI = "http://127.0.0.1/callback"
_CLIENT_ID = "decisionflow-trial"


# The provider's own page frame and error page, which load nothing from anywhere else.
PAGES = Path(__file__).resolve().parent / "trial_pages"


class TrialIdentityError(RuntimeError):
    """The trial provider answered a request with an error; the message says which and how."""


class _QuietRequests(werkzeug.serving.WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # one line per request on stderr would drown the services' logs; errors are still logged


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the redirect carries the authorization code: read it, do not follow it


class TrialIdentityProvider:
    """The trial provider: start (or enter) it, give users claims, get their access tokens."""

    def __init__(self, audience: str, *, port: int = 0, token_lifetime: timedelta = timedelta(hours=1)) -> None:
        self.audience = audience
        self._port = port
        self._lifetime = token_lifetime
        self._retired: list[jose.RSAKey] = []  # earlier keys, still published after a rotation
        self._server: werkzeug.serving.BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._app = self._build_app()
        with self._app.test_request_context():
            self._app.preprocess_request()  # runs the mock's hook that sets its storage on flask.g
            self._storage: Any = flask.g.oidc_provider_mock_storage

    def _build_app(self) -> flask.Flask:
        # Named after the mock's package, so its templates (the sign-in page a browser sees) are found.
        app = flask.Flask(oidc_provider_mock.__name__)
        # Read by Authlib when the mock registers its authorization server, so it must come first.
        app.config["OAUTH2_ACCESS_TOKEN_GENERATOR"] = self._generate_access_token
        oidc_provider_mock.init_app(app, access_token_max_age=self._lifetime)
        # init_app wraps the app in Werkzeug's interactive debugger: unwrap it, no console is served.
        app.debug = False
        app.wsgi_app = app.wsgi_app.app  # type: ignore[attr-defined,method-assign]
        app.secret_key = secrets.token_bytes(16)
        # Its pages (sign-in, errors) extend ours first: the mock's pull a stylesheet from a CDN, which
        # offline leaves the page unstyled and online is a request to a third party.
        app.jinja_loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(PAGES), app.jinja_loader])  # type: ignore[list-item]
        # The JWKS publishes the current key and those retired by rotate_key, as providers do.
        app.view_functions["oidc-provider-mock.jwks"] = self._jwks
        return app

    @property
    def issuer(self) -> str:
        """The issuer URL (``iss`` of its tokens; discovery at ``{issuer}/.well-known/openid-configuration``)."""
        if self._server is None:
            raise RuntimeError("the trial identity provider is not started")
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def kid(self) -> str:
        """The key id of the key new tokens are signed with."""
        return str(self._storage.jwk.thumbprint())

    def start(self) -> Self:
        """Serve on 127.0.0.1 (the port given, or a free one) on a thread; return self."""
        # The mock calls parts of Authlib that warn of their own deprecation on every token; under a
        # warnings-as-errors filter (the tests') each would fail the request. Added here, in front of
        # whatever filters are in force now, and only for those two packages.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(authlib|oidc_provider_mock)(\.|$)")
        logger.warning(
            "trial identity provider: for trying decisionflow only; anyone can sign in as anyone. "
            "Never use it in production."
        )
        server = werkzeug.serving.make_server(
            "127.0.0.1", self._port, self._app, threaded=True, request_handler=_QuietRequests
        )
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.1,), name="trial-identity", daemon=True)
        self._thread.start()
        logger.info("trial identity provider at %s", self.issuer)
        return self

    def stop(self) -> None:
        """Stop serving and close the port (a second call does nothing)."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None and thread is not None:
            server.shutdown()
            thread.join(5)
            server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def set_user(self, sub: str, claims: Mapping[str, object]) -> None:
        """Give the user sub these claims (e.g. ``groups``, ``email``) in tokens issued from now on."""
        self._request("PUT", f"/users/{urllib.parse.quote(sub, safe='')}", json.dumps(dict(claims)).encode(), "json")

    def access_token(self, sub: str, scope: str = "openid email") -> str:
        """Return an access token for sub, obtained as a client does: authorization code, then token."""
        query = urllib.parse.urlencode(
            {"client_id": _CLIENT_ID, "redirect_uri": _REDIRECT_URI, "response_type": "code", "scope": scope}
        )
        location = self._request("POST", f"/oauth2/authorize?{query}", urllib.parse.urlencode({"sub": sub}).encode())
        codes = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query).get("code")
        if not codes:
            raise TrialIdentityError(f"the authorization answered no code: {location!r}")
        form = {
            "grant_type": "authorization_code",
            "code": codes[0],
            "redirect_uri": _REDIRECT_URI,
            "client_id": _CLIENT_ID,
            "client_secret": "any",
        }
        answer = json.loads(self._request("POST", "/oauth2/token", urllib.parse.urlencode(form).encode()))
        token: str = answer["access_token"]
        return token

    def sign(self, claims: Mapping[str, object], *, kid: bool = True) -> str:
        """Return claims signed with the current key, as given (for trying refusals: an expired token,
        another audience); kid False leaves the key id out of the header."""
        headers = {"kid": self.kid} if kid else {}
        return jwt.encode(dict(claims), self._private_key(), algorithm=ALGORITHM, headers=headers)

    def rotate_key(self) -> str:
        """Sign new tokens with a new key, still publishing the old one; return the new kid."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            key = jose.RSAKey.generate_key(is_private=True)
        self._retired.append(self._storage.jwk)
        self._storage.jwk = key  # one reference swapped: a request sees the old key or the new one
        return self.kid

    def _private_key(self) -> Any:
        return jwt.PyJWK(self._storage.jwk.as_dict(is_private=True), ALGORITHM).key

    def _generate_access_token(self, client: Any, grant_type: str, user: Any, scope: str | None) -> str:
        now = int(time.time())
        claims: dict[str, object] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": user.sub,
            "iat": now,
            "exp": now + int(self._lifetime.total_seconds()),
            "groups": user.claims.get("groups", []),
            "scope": scope or "",
        }
        if "email" in user.claims:
            claims["email"] = user.claims["email"]
        return self.sign(claims)

    def _jwks(self) -> flask.Response:
        keys = [key.as_dict() for key in (self._storage.jwk, *self._retired)]
        return flask.jsonify({"keys": [{**key, "alg": ALGORITHM, "use": "sig"} for key in keys]})

    def _request(self, method: str, path: str, body: bytes, kind: str = "form") -> str:
        content_type = "application/json" if kind == "json" else "application/x-www-form-urlencoded"
        request = urllib.request.Request(  # noqa: S310 (the URL is this provider's own http://127.0.0.1)
            self.issuer + path, data=body, method=method, headers={"Content-Type": content_type}
        )
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=10) as response:
                return str(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            if exc.code in (302, 303) and exc.headers.get("Location"):
                return str(exc.headers["Location"])
            raise TrialIdentityError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:500]!r}") from None

"""The issuer's signing keys: fetched from its JWKS URL (found through OpenID discovery when none is
configured), cached, and fetched again when a token names a key the cache lacks or the cache is old.

Fetching runs on a thread of its own and callers await it, so an event loop never waits on the
network; reading the cache (``plan``) does no I/O. Concurrent refreshes share one fetch. Bounds:

- a token naming an unknown ``kid`` causes at most one fetch per ``min_refresh_seconds`` (30 s), so
  tokens with invented key ids cannot make the server hammer the issuer;
- keys older than ``max_age_seconds`` (1 h) are fetched again before use, so a key the issuer
  withdrew stops being accepted;
- after a failed fetch nothing is admitted by a key the cache cannot vouch for, and the next fetch
  waits ``retry_seconds`` (1 s): the caller is told UNAVAILABLE and retries.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import jwt

# Asymmetric signatures only: "none" and the HMAC algorithms (HS*) are never accepted, since an HMAC
# key published in a JWKS would let anyone who reads it sign tokens.
ALLOWED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
FETCH_TIMEOUT_SECONDS = 5.0
# A JWKS or discovery document is a few KiB; a larger answer is not one.
MAX_DOCUMENT_BYTES = 1024 * 1024
MIN_REFRESH_SECONDS = 30.0
MAX_AGE_SECONDS = 3600.0
RETRY_SECONDS = 1.0

FetchJson = Callable[[str], object]


class JwksError(Exception):
    """The keys could not be fetched or are not a usable JWKS; the message says why."""


def discovery_url(issuer: str) -> str:
    """Return the OpenID discovery document's URL for issuer."""
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def fetch_json(url: str) -> object:
    """GET url and return its JSON body; raise JwksError on any failure (blocking: call off the loop)."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 (https or loopback http, checked by the settings)
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_SECONDS) as response:  # noqa: S310
            body = response.read(MAX_DOCUMENT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise JwksError(f"HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise JwksError(str(reason)) from None
    if len(body) > MAX_DOCUMENT_BYTES:
        raise JwksError(f"the answer is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise JwksError("the answer is not JSON") from None


@dataclass(frozen=True, slots=True)
class KeySet:
    """The signing keys of one fetch, by key id, and when they were fetched (monotonic seconds)."""

    by_kid: Mapping[str, jwt.PyJWK]
    signing_keys: tuple[jwt.PyJWK, ...]
    fetched_at: float

    def find(self, kid: str | None) -> jwt.PyJWK | None:
        """Return the key named kid; with no kid, the only signing key when there is exactly one."""
        if kid is None:
            return self.signing_keys[0] if len(self.signing_keys) == 1 else None
        return self.by_kid.get(kid)


def parse_jwks(document: object, fetched_at: float) -> KeySet:
    """Return the usable signing keys of a JWKS document; keys for encryption, symmetric keys and
    keys of algorithms outside ALLOWED_ALGORITHMS are left out. Raise JwksError when none is left."""
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JwksError("not a JWKS document (no 'keys' list)")
    by_kid: dict[str, jwt.PyJWK] = {}
    signing: list[jwt.PyJWK] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") == "oct":
            continue
        try:
            key = jwt.PyJWK(entry)
        except jwt.PyJWTError:
            continue  # a key type this server cannot use does not spoil the others
        if key.algorithm_name not in ALLOWED_ALGORITHMS:
            continue
        signing.append(key)
        kid = entry.get("kid")
        if isinstance(kid, str):
            by_kid[kid] = key
    if not signing:
        raise JwksError("the JWKS holds no usable signing key")
    return KeySet(by_kid, tuple(signing), fetched_at)


class Fetch(Exception):
    """Raised by ``JwksCache.plan`` when the keys must be fetched before the token can be checked."""

    def __init__(self, *, unknown_kid: bool) -> None:
        super().__init__("the signing keys must be fetched")
        self.unknown_kid = unknown_kid


class Unavailable(Exception):
    """Raised by ``JwksCache.plan`` when the keys cannot be had now; the message is the last fetch's error."""


class JwksCache:
    """The signing keys of one issuer, fetched at most as often as the module docstring says."""

    def __init__(
        self,
        issuer: str,
        jwks_url: str | None = None,
        *,
        min_refresh_seconds: float = MIN_REFRESH_SECONDS,
        max_age_seconds: float = MAX_AGE_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        fetch: FetchJson = fetch_json,
    ) -> None:
        self._issuer = issuer
        self._jwks_url = jwks_url
        self._min_refresh = min_refresh_seconds
        self._max_age = max_age_seconds
        self._retry = retry_seconds
        self._clock = clock
        self._fetch = fetch
        self._lock = threading.Lock()
        self._keys: KeySet | None = None
        self._error: str | None = None  # the last fetch's failure; None once a fetch succeeds
        self._failed_at = 0.0
        self._unknown_kid_fetched_at: float | None = None
        self._inflight: Future[None] | None = None
        self.fetches = 0
        """How many fetches have run (each one a JWKS request, after a discovery request when needed)."""

    @property
    def url(self) -> str:
        """The JWKS URL (configured or discovered), else the discovery URL it is to be found at."""
        return self._jwks_url or discovery_url(self._issuer)

    def plan(self, kid: str | None) -> jwt.PyJWK | None:
        """Return the key to check a token naming kid with, None when the cache knows no such key and
        may not fetch again yet; raise Fetch when a fetch must come first, Unavailable when the keys
        cannot be had now."""
        now = self._clock()
        with self._lock:
            keys, error = self._keys, self._error
            retry_due = now - self._failed_at >= self._retry
            last_unknown = self._unknown_kid_fetched_at
        unknown_due = last_unknown is None or now - last_unknown >= self._min_refresh
        fresh = keys is not None and now - keys.fetched_at < self._max_age
        key = keys.find(kid) if keys is not None and fresh else None
        if key is not None:
            return key
        if error is not None:
            # The last fetch failed: nothing the cache cannot vouch for is decided until one succeeds.
            if retry_due:
                raise Fetch(unknown_kid=False)
            raise Unavailable(error)
        if not fresh:
            raise Fetch(unknown_kid=False)
        if kid is not None and unknown_due:
            raise Fetch(unknown_kid=True)
        return None

    async def refresh(self, *, unknown_kid: bool = False) -> None:
        """Fetch the keys on a thread and return when done (joining a fetch already running); a failure
        is kept for ``plan`` to report, never raised here."""
        with self._lock:
            if self._inflight is None:
                if unknown_kid:
                    self._unknown_kid_fetched_at = self._clock()
                future: Future[None] = Future()
                self._inflight = future
                threading.Thread(target=self._run, args=(future,), name="jwks-fetch", daemon=True).start()
            inflight = self._inflight
        await asyncio.wrap_future(inflight)

    @property
    def error(self) -> str | None:
        """Why the last fetch failed, None when it succeeded (or none has run)."""
        with self._lock:
            return self._error

    def _run(self, future: Future[None]) -> None:
        try:
            keys = self._load()
        except JwksError as exc:
            with self._lock:
                self._error, self._failed_at = str(exc), self._clock()
        except Exception as exc:  # whatever fails here is a failed fetch, reported to the callers
            with self._lock:
                self._error, self._failed_at = f"{type(exc).__name__}: {exc}", self._clock()
        else:
            with self._lock:
                self._keys, self._error = keys, None
        finally:
            with self._lock:
                self._inflight = None
                self.fetches += 1
            future.set_result(None)

    def _load(self) -> KeySet:
        url = self._jwks_url
        if url is None:
            url = self._discover()
        return parse_jwks(self._fetch(url), self._clock())

    def _discover(self) -> str:
        document: Any = self._fetch(discovery_url(self._issuer))
        if not isinstance(document, dict) or not isinstance(document.get("jwks_uri"), str):
            raise JwksError(f"{discovery_url(self._issuer)} names no jwks_uri")
        # OpenID discovery: the document must be the issuer's own, or its keys vouch for someone else.
        if document.get("issuer") != self._issuer:
            raise JwksError(f"{discovery_url(self._issuer)} is the document of issuer {document.get('issuer')!r}")
        url: str = document["jwks_uri"]
        self._jwks_url = url
        return url

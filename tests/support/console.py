"""Console tests: a real browser (Playwright driving the system's chromium), a real OpenID provider
in the test process, and the console served by uvicorn on a free port in front of a real stack.

    def test_x(console: ConsoleUnderTest, page: Page) -> None:
        console.sign_in(page, "ana", groups=["reviewers"])
        page.goto(console.url("/start"))
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
import uvicorn
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from decisionflow.console.app import create_app
from decisionflow.console.config import ConsoleConfig
from decisionflow.console.sessions import COOKIE_NAME, Session, SessionStore
from decisionflow.processes import free_port
from tests.support.stack import Stack

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
CLIENT_ID = "decisionflow-console"
CLIENT_SECRET = "console-client-secret"
SESSION_KEY = b"s" * 32


class ConsoleServer:
    """The console app served by uvicorn on a daemon thread, on a socket bound before it starts."""

    def __init__(self, app: Any, listener: socket.socket) -> None:
        self._server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
        self._listener = listener
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [listener]}, daemon=True)

    def start(self) -> None:
        """Start serving; return once the app's lifespan has run."""
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the console did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.should_exit = True
        self._thread.join(20)
        self._listener.close()


@dataclass
class ConsoleUnderTest:
    """A console in front of stack, signing in at the provider at issuer."""

    base: str
    issuer: str
    stack: Stack
    sessions: SessionStore
    servers: list[ConsoleServer] = field(default_factory=list)

    def url(self, path: str) -> str:
        """Return the console URL of path."""
        return self.base + path

    def session_of(self, context: BrowserContext) -> Session:
        """Return the server-side session the browser context's cookie names."""
        cookies = [c["value"] for c in context.cookies() if c["name"] == COOKIE_NAME]
        session = self.sessions.find(cookies[0] if cookies else None)
        assert session is not None, "the browser holds no live session"
        return session

    def set_person(self, subject: str, groups: list[str], name: str | None = None) -> None:
        """Give subject these claims at the provider (the groups claim and a display name)."""
        claims = {"name": name or subject.title(), "email": f"{subject}@example.com", "groups": groups}
        response = httpx2.put(f"{self.issuer}/users/{quote(subject)}", json=claims, timeout=10)
        assert response.status_code == 204, response.text

    def sign_in(self, page: Page, subject: str, groups: list[str] | None = None) -> None:
        """Sign page's browser context in as subject through the provider's own page."""
        self.set_person(subject, groups or ["reviewers", "authors", "operators"])
        page.goto(self.url("/login"))
        page.get_by_placeholder("sub").fill(subject)
        page.get_by_role("button", name="Authorize").click()
        page.wait_for_url(self.base + "/**")
        assert page.locator("#person").inner_text() == subject.title()


def free_listener() -> socket.socket:
    """Return a listening socket on a free loopback port."""
    return socket.create_server(("127.0.0.1", 0))


def console_config(issuer: str, stack: Stack, **overrides: Any) -> ConsoleConfig:
    """The configuration of a console in front of stack, signing in at issuer."""
    settings: dict[str, Any] = {
        "oidc_issuer": issuer,
        "oidc_client_id": CLIENT_ID,
        "oidc_client_secret": CLIENT_SECRET,
        "session_key": SESSION_KEY,
        "orchestrator_target": f"127.0.0.1:{stack.orchestrator_port}",
        "timeout_seconds": 5.0,
        **overrides,
    }
    return ConsoleConfig(**settings)


@pytest.fixture(scope="session")
def oidc_issuer() -> Iterator[str]:
    """A real OpenID provider (oidc-provider-mock) in its own process on a free port, for the session.

    Its own process: it runs Authlib code paths that warn of deprecations, which this suite's
    warnings-as-errors would turn into failed token requests inside the provider."""
    port = free_port()
    issuer = f"http://localhost:{port}"
    provider = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-m", "oidc_provider_mock", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx2.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline or provider.poll() is not None:
                raise RuntimeError("the OpenID provider did not start")
            time.sleep(0.1)
        yield issuer
    finally:
        provider.terminate()
        provider.wait(10)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless chromium for the session: the system's (Debian package), never a download."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install the chromium package (.ci/run does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield launched
        launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser profile (no cookies) per test."""
    opened = browser.new_context(viewport={"width": 1200, "height": 900})
    opened.set_default_timeout(10_000)
    yield opened
    opened.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    """A tab in the test's browser profile."""
    return context.new_page()


@pytest.fixture
def make_console(oidc_issuer: str) -> Iterator[Callable[..., ConsoleUnderTest]]:
    """Serve consoles in front of stacks: make_console(stack, **ConsoleConfig overrides)."""
    running: list[ConsoleServer] = []

    def make(stack: Stack, **overrides: Any) -> ConsoleUnderTest:
        listener = free_listener()
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        config = console_config(oidc_issuer, stack, **overrides)
        sessions = SessionStore(config.session_key, config.session_lifetime_seconds)
        server = ConsoleServer(create_app(config, base, sessions=sessions), listener)
        server.start()
        running.append(server)
        return ConsoleUnderTest(base, oidc_issuer, stack, sessions, [server])

    yield make
    for server in running:
        server.stop()


def screenshot(page: Page, name: str) -> None:
    """Save the page as docs/images/console-NAME.png for docs/console.md."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / f"console-{name}.png"), full_page=True)

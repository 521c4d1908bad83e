"""Console tests: a real browser (Playwright driving the system's chromium), the trial OpenID provider
(``decisionflow_demo.trial_identity``, JWT access tokens) in the test, a real receiver and orchestrator
that accept its tokens and map its groups to roles, and the console served by uvicorn on a free port.

    def test_x(make_console: Callable[..., ConsoleUnderTest], page: Page) -> None:
        console = make_console(four_eyes=True)          # OrchestratorConfig overrides
        console.sign_in(page, "ana", groups=["reviewers"])
        page.goto(console.url("/start"))

People sign in on the provider's own page; the console then calls the orchestrator with their
access token, so every role check in these tests is the orchestrator's. Without /usr/bin/chromium
the browser tests skip with the reason, unless ``DECISIONFLOW_REQUIRE_CHROMIUM=1`` or ``CI=true``
(as in CI), where they fail instead.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from decisionflow_console.config import ConsoleConfig
from decisionflow_server.runtime.auth import bearer_metadata, issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.auth import ROLES
from tests.support.oidc import oidc_config
from tests.support.servers import LoopThread
from tests.support.stack import Stack

if TYPE_CHECKING:
    # The console extra (Starlette, uvicorn, Authlib) is imported only when a console test runs:
    # this plugin is loaded by every test run, the other Pythons' (`make pythons`, dev extra only) too.
    from decisionflow_console.sessions import Session, SessionStore
    from decisionflow_demo.trial_identity import TrialIdentityProvider

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
CLIENT_ID = "decisionflow-console"
CLIENT_SECRET = "console-client-secret"
SESSION_KEY = b"s" * 32
EVERY_ROLE = ["reviewers", "authors", "operators"]


class ConsoleServer:
    """The console app served by uvicorn on a daemon thread, on a socket bound before it starts."""

    def __init__(self, app: Any, listener: socket.socket) -> None:
        import uvicorn

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
class ConsoleStack:
    """A receiver and an orchestrator that accept the provider's tokens (and the test credentials
    file's, which the orchestrator uses to call the receiver)."""

    stack: Stack
    security: ServerSecurity
    # Static tokens of the test credentials file (tests.support.auth.ROLES), by principal.
    tokens: dict[str, str]

    def as_static(self, principal: str) -> tuple[tuple[str, str], ...]:
        """Call metadata carrying principal's static token (edna reads the receiver's effects)."""
        return bearer_metadata(self.tokens[principal])

    def stop_receiver(self) -> None:
        """Stop the receiver (an outage); restart_receiver brings it back on the same address."""
        self.stack.loop.run(self.stack.receiver_server.stop(0))

    def restart_receiver(self, failpoints: str = "") -> None:
        """Restart the receiver on the address the orchestrator dials, with failpoints (none: healthy)."""
        port = self.stack.receiver_port
        self.stack.start_receiver(failpoints, address=f"127.0.0.1:{port}", security=self.security)


def start_console_stack(
    directory: Path,
    provider: TrialIdentityProvider,
    *,
    receiver_failpoints: str = "",
    receiver: dict[str, Any] | None = None,
    **orchestrator: Any,
) -> ConsoleStack:
    """Start a receiver (with failpoints and ReceiverConfig overrides) and an orchestrator
    (OrchestratorConfig overrides) that accept provider's tokens."""
    credentials = directory / "credentials.json"
    tokens = {name: issue_token(credentials, name, roles) for name, roles in ROLES.items()}
    security = ServerSecurity(credentials_file=credentials, oidc=oidc_config(provider))
    stack = Stack(f"sqlite:///{directory / 'receiver.db'}", f"sqlite:///{directory / 'orchestrator.db'}", LoopThread())
    try:
        stack.start_receiver(receiver_failpoints, security=security, **(receiver or {}))
        stack.start_orchestrator(security=security, receiver_token=tokens["walter"], **orchestrator)
    except BaseException:
        stack.close()
        raise
    return ConsoleStack(stack, security, tokens)


@dataclass
class ConsoleUnderTest:
    """A console in front of a stack, signing people in at the trial provider."""

    base: str
    provider: TrialIdentityProvider
    servers: ConsoleStack
    sessions: SessionStore
    running: list[ConsoleServer] = field(default_factory=list)

    @property
    def stack(self) -> Stack:
        """The receiver and orchestrator behind the console."""
        return self.servers.stack

    def url(self, path: str) -> str:
        """Return the console URL of path."""
        return self.base + path

    def session_of(self, context: BrowserContext) -> Session:
        """Return the server-side session the browser context's cookie names."""
        from decisionflow_console.sessions import COOKIE_NAME

        cookies = [c["value"] for c in context.cookies() if c["name"] == COOKIE_NAME]
        session = self.sessions.find(cookies[0] if cookies else None)
        assert session is not None, "the browser holds no live session"
        return session

    def sign_in(self, page: Page, subject: str, groups: list[str] | None = None) -> None:
        """Sign page's browser context in as subject (with groups at the provider) on the provider's page."""
        claims = {"name": subject.title(), "email": f"{subject}@example.com", "groups": groups or EVERY_ROLE}
        self.provider.set_user(subject, claims)
        page.goto(self.url("/login"))
        page.get_by_placeholder("sub").fill(subject)
        page.get_by_role("button", name="Authorize").click()
        page.wait_for_url(self.base + "/**")
        assert page.locator("#person").inner_text() == subject.title()


def console_config(issuer: str, orchestrator_port: int, **overrides: Any) -> ConsoleConfig:
    """The configuration of a console before the orchestrator at orchestrator_port, signing in at issuer."""
    config = ConsoleConfig(
        oidc_issuer=issuer,
        oidc_client_id=CLIENT_ID,
        oidc_client_secret=CLIENT_SECRET,
        session_key=SESSION_KEY,
        orchestrator_target=f"127.0.0.1:{orchestrator_port}",
        timeout_seconds=5.0,
    )
    return replace(config, **overrides)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless chromium per test module: the system's (Debian package), never a download.

    Not one per session: Playwright's synchronous API keeps an asyncio loop running in the main
    thread while it is open, and tests of other modules that call asyncio.run() there would fail."""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: install the chromium package (.ci/run does)"
        if os.environ.get("DECISIONFLOW_REQUIRE_CHROMIUM") == "1" or os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; required here (CI=true or DECISIONFLOW_REQUIRE_CHROMIUM=1)")
        pytest.skip(reason)
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
def make_console(tmp_path: Path, trial_identity: TrialIdentityProvider) -> Iterator[Callable[..., ConsoleUnderTest]]:
    """Start a stack and a console before it: make_console(receiver_failpoints=..., receiver={...},
    console={ConsoleConfig overrides} (or a function of the started stack returning them, for a setting that
    names something started beside the stack), clock=the sessions' clock, orchestrator_clock=the
    orchestrator's, **OrchestratorConfig overrides). One per test."""
    from decisionflow_console.app import create_app
    from decisionflow_console.sessions import SessionStore

    consoles: list[ConsoleUnderTest] = []

    def make(
        *,
        console: dict[str, Any] | Callable[[ConsoleStack], dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.time,
        orchestrator_clock: Callable[[], datetime] | None = None,
        **stack_settings: Any,
    ) -> ConsoleUnderTest:
        if orchestrator_clock is not None:
            stack_settings["clock"] = orchestrator_clock
        servers = start_console_stack(tmp_path, trial_identity, **stack_settings)
        listener = socket.create_server(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        try:
            overrides = console(servers) if callable(console) else (console or {})
        except BaseException:
            servers.stack.close()
            raise
        config = console_config(trial_identity.issuer, servers.stack.orchestrator_port, **overrides)
        sessions = SessionStore(config.session_key, config.session_lifetime_seconds, clock=clock)
        server = ConsoleServer(create_app(config, base, sessions=sessions), listener)
        made = ConsoleUnderTest(base, trial_identity, servers, sessions, [server])
        consoles.append(made)
        server.start()
        return made

    yield make
    for made in consoles:
        for server in made.running:
            server.stop()
        made.stack.close()


def screenshot(page: Page, name: str) -> None:
    """Take the page's screenshot (it must render); with DECISIONFLOW_UPDATE_SCREENSHOTS=1, save it as
    docs/images/console-NAME.png for docs/console.md (a plain test run leaves the tree clean)."""
    image = page.screenshot(full_page=True)
    assert image.startswith(b"\x89PNG"), f"screenshot {name} is not a PNG"
    if os.environ.get("DECISIONFLOW_UPDATE_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        (IMAGES / f"console-{name}.png").write_bytes(image)

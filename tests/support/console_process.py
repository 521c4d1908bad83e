"""The console as a real process in front of a real receiver and orchestrator, and people signed in
to it over plain HTTP at the trial OpenID provider (no browser): for the tests that load the console
with raw sockets.

    with console_process(tmp_path, trial_identity, "--max-connections", "40") as console:
        reviewer = console.signed_in("rita", groups=["reviewers"])   # an httpx2.Client holding the session
        assert reviewer.get("/inbox").status_code == 200
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2

from decisionflow_server.foundation.processes import ServiceProcess, free_port, spawn
from tests.support.console import CLIENT_ID, CLIENT_SECRET, SESSION_KEY, ConsoleStack, start_console_stack

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

MODULE = "decisionflow_console.main"


@dataclass
class ConsoleProcess:
    """A console process before a stack, its metrics port, and the HTTP clients opened on it."""

    process: ServiceProcess
    servers: ConsoleStack
    provider: TrialIdentityProvider
    metrics_port: int
    clients: list[httpx2.Client] = field(default_factory=list)

    @property
    def base(self) -> str:
        """The console's origin."""
        return f"http://127.0.0.1:{self.process.port}"

    def client(self, *, local_address: str | None = None) -> httpx2.Client:
        """An HTTP client of the console (from local_address, such as 127.0.0.2, if given), closed at the end."""
        transport = httpx2.HTTPTransport(local_address=local_address) if local_address else None
        opened = httpx2.Client(base_url=self.base, timeout=10, transport=transport)
        self.clients.append(opened)
        return opened

    def signed_in(self, subject: str, groups: list[str]) -> httpx2.Client:
        """A client signed in as subject (with groups at the provider), through the console's own
        /login and /auth/callback; it holds the session cookie."""
        self.provider.set_user(subject, {"name": subject.title(), "groups": groups})
        person = self.client()
        to_provider = person.get("/login")
        assert to_provider.status_code == 302, to_provider.text
        # The provider's sign-in page posts the subject to the authorization URL it was opened at.
        answered = httpx2.post(to_provider.headers["location"], data={"sub": subject}, timeout=10)
        assert answered.status_code == 302, answered.text
        callback = person.get(answered.headers["location"])
        assert callback.status_code == 303, callback.text
        return person

    def metric(self, sample: str) -> float | None:
        """The value of one sample (``name{labels}``) of the console's metrics; None when it is absent."""
        scrape = httpx2.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        for line in scrape.splitlines():
            name, _, value = line.rpartition(" ")
            if name == sample:
                return float(value)
        return None

    def log_lines(self) -> list[dict[str, object]]:
        """The JSON lines the console wrote on stderr so far."""
        return [json.loads(line) for line in self.process.stderr().splitlines() if line.startswith("{")]


@contextmanager
def console_process(directory: Path, provider: TrialIdentityProvider, *flags: str) -> Iterator[ConsoleProcess]:
    """Start a receiver, an orchestrator and a console process before them (with flags), signing in at
    provider; stop them all at the end (the console must exit 0)."""
    servers = start_console_stack(directory, provider)
    key = directory / "session.key"
    key.write_bytes(SESSION_KEY)
    secret = directory / "client.secret"
    secret.write_text(CLIENT_SECRET)
    metrics_port = free_port()
    args = [
        "--address", "127.0.0.1:0",
        "--oidc-issuer", provider.issuer,
        "--oidc-client-id", CLIENT_ID,
        "--oidc-client-secret-file", str(secret),
        "--session-key-file", str(key),
        "--orchestrator-target", f"127.0.0.1:{servers.stack.orchestrator_port}",
        "--metrics-port", str(metrics_port),
        *flags,
    ]  # fmt: skip
    try:
        process = spawn(MODULE, args, directory, "console")
    except BaseException:
        servers.stack.close()
        raise
    console = ConsoleProcess(process, servers, provider, metrics_port)
    try:
        yield console
    finally:
        for opened in console.clients:
            opened.close()
        status = process.stop()
        servers.stack.close()
        assert status == 0, f"the console exited {status}"

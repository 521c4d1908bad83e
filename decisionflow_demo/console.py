"""``decisionflow demo --console``: the review console on the demo's stack, to try in a browser.

In a fresh state directory it starts the trial identity provider (in this process, on 127.0.0.1,
FOR TRYING ONLY: anyone who reaches it signs in as anyone), a receiver and an orchestrator as
child processes that accept the provider's access tokens (the groups reviewers, authors and
operators grant the roles of those names) beside the credentials file the orchestrator calls the
receiver with, seeds two cases waiting for review, and starts ``decisionflow-console`` in front of
them. It runs until SIGINT or SIGTERM, then stops every child.

Exit status: 0 stopped by SIGINT (Ctrl-C) or SIGTERM once running; 1 it could not start (the
console's address is taken, an extra is missing) or a part stopped on its own; 2 bad usage;
130 interrupted while starting.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from decisionflow.addresses import is_loopback, split_host_port
from decisionflow_demo import workspace as ws
from decisionflow_demo.children import Children, DemoError, Service, child_environment
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    RECONCILER_MODULE,
    orchestrator_args,
    receiver_args,
)
from decisionflow_demo.run import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, signals_interrupt, uninterruptible
from decisionflow_demo.seeding import seed_cases
from decisionflow_demo.stack import Transcript
from decisionflow_demo.story import LOSE_EVERY_REPLY
from decisionflow_server.foundation.processes import free_port

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

DEFAULT_CONSOLE_ADDRESS = "127.0.0.1:8080"
CONSOLE_MODULE = "decisionflow_console.main"
INSTALL_HINT = "pip install '.[console,trial]'"
AUDIENCE = "decisionflow-demo"
CLIENT_ID = "decisionflow-console"
ROLE_MAP = "reviewers=reviewer,authors=author,operators=operator"
# What each extra brings that this mode imports: the console's server, its sign-in, the trial provider.
_NEEDED = {"uvicorn": "console", "starlette": "console", "authlib": "console", "oidc_provider_mock": "trial"}
# Long enough to try things without being signed out (a console session ends with its access token).
_TOKEN_LIFETIME = timedelta(hours=8)


@dataclass(frozen=True)
class Person:
    """Someone to sign in as at the trial provider: their name, their groups, what they let them do."""

    name: str
    groups: tuple[str, ...]
    may: str

    @property
    def group(self) -> str:
        """The groups as the invitation shows them."""
        return "+".join(self.groups)


# Author and reviewer at once: the demo's orchestrator runs the four-eyes rule, which refuses them their own.
BOTH = "sam"
PEOPLE = (
    Person(ws.REVIEWER, ("reviewers",), "read a proposal, see what changed, approve or decline it"),
    Person(ws.AUTHOR, ("authors",), "start a case, edit a proposal"),
    Person(ws.OPERATOR, ("operators",), "the operator desk: find operations whose outcome is Unknown and settle them"),
    Person(BOTH, ("authors", "reviewers"), "start a case, then try to approve it: the four-eyes rule refuses"),
)
# A reconciler pass every this many seconds, over operations Unknown at least as long.
RECONCILE_SECONDS = 5


@dataclass(frozen=True)
class ConsoleDemoOptions:
    """How to run the console demo; None means the default, as for the demo."""

    state_dir: Path | None = None
    orchestrator_database_url: str | None = None
    receiver_database_url: str | None = None
    console_address: str = DEFAULT_CONSOLE_ADDRESS
    # The receiver writes each effect and loses its reply: every approval answers Unknown until the
    # reconciler settles it by lookup (a few seconds later).
    lose_replies: bool = False
    workers: int = 1
    out: TextIO | None = None  # None: sys.stdout at the time of the run


def require_extras() -> None:
    """Raise DemoError naming the extras to install when a package this mode needs is missing."""
    missing = sorted({extra for module, extra in _NEEDED.items() if importlib.util.find_spec(module) is None})
    if missing:
        raise DemoError(
            f"--console needs the {' and '.join(missing)} extra{'s' if len(missing) > 1 else ''} of decisionflow: "
            f"{INSTALL_HINT} in the repository (make setup installs them)"
        )


def check_console_address(address: str) -> None:
    """Raise DemoError (exit 2) for an address beyond loopback, (exit 1) for one that cannot be bound now."""
    try:
        host, port = split_host_port(address)
    except ValueError as exc:
        raise DemoError(f"--console-address: {exc}", exit_code=2) from None
    if not is_loopback(address):
        # The trial provider lets anyone sign in as anyone: the console it serves stays on this machine.
        raise DemoError(f"--console-address must be a loopback address (127.0.0.1:PORT), not {address}", exit_code=2)
    if port == 0:
        return
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise DemoError(
            f"cannot listen on {address} (--console-address): {os.strerror(exc.errno) if exc.errno else exc}; "
            "choose another with --console-address 127.0.0.1:PORT (port 0 picks a free one)"
        ) from None


def run_console_demo(options: ConsoleDemoOptions) -> int:
    """Start the provider, the services and the console, seed two cases, serve until SIGINT/SIGTERM;
    every child is stopped on every path. Return the exit status."""
    require_extras()
    check_console_address(options.console_address)
    try:
        workspace = ws.prepare(options.state_dir, options.orchestrator_database_url, options.receiver_database_url)
    except ValueError as exc:
        raise DemoError(str(exc), exit_code=2) from exc
    say = Transcript(options.out or sys.stdout)
    say.plain(f"decisionflow demo --console in {workspace.root} (databases, secrets and logs/)")
    children = Children(workspace.logs, child_environment(), workspace.root)
    provider: TrialIdentityProvider | None = None
    running = False
    with signals_interrupt():
        try:
            provider = _start_provider(say)
            orchestrator, receiver = _start_services(workspace, children, provider, options, say)
            seed_cases(workspace, orchestrator.target, provider, say)
            _start_reconciler(workspace, children, orchestrator, receiver, say)
            console = _start_console(workspace, children, provider, orchestrator, options.console_address)
            running = True  # before the invitation: a stop asked for once it is printed is a clean one
            _invite(say, console, options.console_address, workspace)
            stopped = _watch(children)
            say.plain(f"{stopped.name} stopped on its own (exit {stopped.process.poll()}); see {stopped.log_path}")
            exit_code = EXIT_FAILED
        except KeyboardInterrupt:
            exit_code = EXIT_OK if running else EXIT_INTERRUPTED
        finally:
            with uninterruptible():
                names = ", ".join(service.name for service in children.services)
                children.close()
                if provider is not None:
                    provider.stop()
                if names:
                    say.plain(f"Stopped {names} and the trial identity provider.")
    return exit_code


def _start_provider(say: Transcript) -> TrialIdentityProvider:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

    provider = TrialIdentityProvider(AUDIENCE, token_lifetime=_TOKEN_LIFETIME).start()
    for person in PEOPLE:
        provider.set_user(person.name, {"name": person.name.title(), "groups": list(person.groups)})
    say.plain(
        f"trial identity provider at {provider.issuer}: FOR TRYING ONLY, anyone who reaches it signs in as "
        "anyone; never use it in a deployment"
    )
    return provider


def _oidc_flags(provider: TrialIdentityProvider, workspace: ws.Workspace) -> list[str]:
    return [
        "--credentials-file",
        str(workspace.credentials),
        "--oidc-issuer",
        provider.issuer,
        "--oidc-audience",
        AUDIENCE,
        "--oidc-role-map",
        ROLE_MAP,
        "--shutdown-grace-seconds",
        "2",
    ]


def _start_services(
    workspace: ws.Workspace,
    children: Children,
    provider: TrialIdentityProvider,
    options: ConsoleDemoOptions,
    say: Transcript,
) -> tuple[Service, Service]:
    per_server = ["--workers", str(options.workers)] if options.workers > 1 else []
    common = [*_oidc_flags(provider, workspace), *per_server]
    receiver_target = f"127.0.0.1:{free_port()}"
    failpoints = LOSE_EVERY_REPLY if options.lose_replies else ""
    receiver = children.launch(
        "receiver",
        RECEIVER_MODULE,
        receiver_args(workspace.receiver_url, address=receiver_target, failpoints=failpoints, extra=common),
    )
    # The orchestrator calls the receiver with its static token; people's tokens come from the provider.
    calls_receiver = ["--receiver-token-file", str(workspace.token_file(ws.ORCHESTRATOR)), "--four-eyes", "true"]
    keys = workspace.checkpoint_keys.read_text(encoding="utf-8").strip()
    orchestrator = children.launch(
        "orchestrator",
        ORCHESTRATOR_MODULE,
        orchestrator_args(workspace.orchestrator_url, receiver_target, extra=[*common, *calls_receiver]),
        env={CHECKPOINT_KEYS_ENV: keys},  # in the environment, not on the command line where ps shows it
    )
    children.wait_ready(receiver, orchestrator)
    say.plain(f"receiver pid {receiver.pid} on {receiver.target}")
    say.plain(
        f"orchestrator pid {orchestrator.pid} on {orchestrator.target}, accepting the provider's tokens "
        f"(groups to roles: {ROLE_MAP}), four-eyes on"
    )
    if options.lose_replies:
        say.plain("--lose-replies: the receiver writes each effect and loses its reply, so approvals answer Unknown")
    return orchestrator, receiver


def _start_reconciler(
    workspace: ws.Workspace, children: Children, orchestrator: Service, receiver: Service, say: Transcript
) -> None:
    """The reconciler's loop, as operators run it: it settles what an approval left Unknown."""
    args = [
        "--interval", str(RECONCILE_SECONDS),
        "--grace-seconds", str(RECONCILE_SECONDS),
        "--orchestrator-target", orchestrator.target,
        "--receiver-target", receiver.target,
        "--orchestrator-token-file", str(workspace.token_file(ws.OPERATOR)),
        "--receiver-token-file", str(workspace.token_file(ws.RECONCILER_READER)),
    ]  # fmt: skip
    reconciler = children.launch("reconciler", RECONCILER_MODULE, args, announces_port=False)
    say.plain(f"reconciler pid {reconciler.pid}, a pass every {RECONCILE_SECONDS} s: it settles each Unknown")


def _start_console(
    workspace: ws.Workspace, children: Children, provider: TrialIdentityProvider, orchestrator: Service, address: str
) -> Service:
    client_secret, session_key = workspace.root / "console-client-secret", workspace.root / "console-session-key"
    ws.write_private(client_secret, secrets.token_urlsafe(32) + "\n")
    ws.write_private(session_key, secrets.token_urlsafe(48) + "\n")
    args = [
        "--address",
        address,
        "--orchestrator-target",
        orchestrator.target,
        "--oidc-issuer",
        provider.issuer,
        "--oidc-client-id",
        CLIENT_ID,
        "--oidc-client-secret-file",
        str(client_secret),
        "--session-key-file",
        str(session_key),
    ]
    console = children.launch("console", CONSOLE_MODULE, args)
    children.wait_ready(console)
    return console


def console_url(address: str, port: int) -> str:
    """The URL a browser opens: the console's host from address and the port it announced."""
    host, _ = split_host_port(address)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _invite(say: Transcript, console: Service, address: str, workspace: ws.Workspace) -> None:
    say.plain(f"console pid {console.pid}")
    say.plain("")
    say.plain(
        f"Open {console_url(address, console.port)} and sign in: type a name on the provider's page, then Authorize."
    )
    name_width = max(len(person.name) for person in PEOPLE)
    group_width = max(len(person.group) for person in PEOPLE) + 2
    for person in PEOPLE:
        say.line(f"{person.name:<{name_width}}  {'(' + person.group + ')':<{group_width}}  {person.may}")
    say.plain("Any other name signs in with no group, so the orchestrator refuses it every role.")
    say.plain(f"Logs: {workspace.logs}")
    say.plain("Ctrl-C stops everything.")


def _watch(children: Children) -> Service:
    """Wait until a child exits on its own and return it (a signal interrupts the wait)."""
    while True:
        for service in children.services:
            if service.process.poll() is not None:
                return service
        time.sleep(0.5)

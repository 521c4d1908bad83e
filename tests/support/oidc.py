"""The trial OIDC provider running in the test, and a real receiver and orchestrator accepting its
access tokens beside a credentials file (``OidcStack``).

The provider's users, by the groups their tokens carry: ``rita`` (reviewers), ``arthur`` (authors),
``sam`` (authors and reviewers), ``nobody`` (a group no role is mapped to). Static tokens for every
principal of ``tests.support.auth.ROLES`` are in the credentials file too (``walter`` calls the receiver).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from decisionflow_server.runtime.auth import OidcConfig, Role, bearer_metadata, issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.auth import ROLES
from tests.support.servers import LoopThread
from tests.support.stack import Stack

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

AUDIENCE = "decisionflow-test"
ROLE_MAP: tuple[tuple[str, frozenset[Role]], ...] = (
    ("reviewers", frozenset({Role.REVIEWER})),
    ("authors", frozenset({Role.AUTHOR})),
    ("operators", frozenset({Role.OPERATOR})),
    ("auditors", frozenset({Role.AUDITOR})),
)
USERS: dict[str, list[str]] = {
    "rita": ["reviewers"],
    "arthur": ["authors"],
    "sam": ["authors", "reviewers"],
    "nobody": ["visitors"],
}


def oidc_config(provider: TrialIdentityProvider, **overrides: Any) -> OidcConfig:
    """The services' OIDC settings for provider's tokens (ROLE_MAP; overrides replace fields)."""
    values: dict[str, Any] = {"issuer": provider.issuer, "audience": AUDIENCE, "role_map": ROLE_MAP, **overrides}
    return OidcConfig(**values)


@pytest.fixture
def trial_identity() -> Iterator[TrialIdentityProvider]:
    """The trial provider on a free port, with USERS (email ``{name}@example.com``) set."""
    from decisionflow_demo.trial_identity import TrialIdentityProvider

    with TrialIdentityProvider(AUDIENCE) as provider:
        for name, groups in USERS.items():
            provider.set_user(name, {"groups": groups, "email": f"{name}@example.com"})
        yield provider


@dataclass
class OidcStack:
    """A receiver and an orchestrator accepting the provider's tokens and the credentials file's."""

    stack: Stack
    provider: TrialIdentityProvider
    tokens: dict[str, str]

    def as_user(self, name: str) -> tuple[tuple[str, str], ...]:
        """Call metadata carrying a fresh access token of the provider's user name."""
        return bearer_metadata(self.provider.access_token(name))

    def as_static(self, principal: str) -> tuple[tuple[str, str], ...]:
        """Call metadata carrying principal's token from the credentials file."""
        return bearer_metadata(self.tokens[principal])


def start_oidc_stack(
    directory: Path, provider: TrialIdentityProvider, oidc: OidcConfig | None = None, **orchestrator: Any
) -> OidcStack:
    """Start both servers with a credentials file and OIDC (oidc_config(provider) unless oidc is given)."""
    credentials = directory / "credentials.json"
    tokens = {name: issue_token(credentials, name, roles) for name, roles in ROLES.items()}
    security = ServerSecurity(credentials_file=credentials, oidc=oidc or oidc_config(provider))
    stack = Stack(f"sqlite:///{directory / 'receiver.db'}", f"sqlite:///{directory / 'orchestrator.db'}", LoopThread())
    try:
        stack.start_receiver(security=security)
        stack.start_orchestrator(security=security, receiver_token=tokens["walter"], **orchestrator)
    except BaseException:
        stack.close()
        raise
    return OidcStack(stack, provider, tokens)


@pytest.fixture
def oidc_stack(tmp_path: Path, trial_identity: TrialIdentityProvider) -> Iterator[OidcStack]:
    """An OIDC stack with default orchestrator settings, for one test."""
    started = start_oidc_stack(tmp_path, trial_identity)
    try:
        yield started
    finally:
        started.stack.close()

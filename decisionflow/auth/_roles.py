"""Roles and the authenticated principal."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

Via = Literal["token", "certificate", "oidc", "anonymous"]


class Role(enum.Enum):
    """What a principal may do; each RPC names the roles allowed to call it."""

    REVIEWER = "reviewer"
    AUTHOR = "author"
    OPERATOR = "operator"
    EFFECT_WRITER = "effect_writer"
    EFFECT_READER = "effect_reader"


ALL_ROLES: frozenset[Role] = frozenset(Role)
ROLE_NAMES: tuple[str, ...] = tuple(role.value for role in Role)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, with the roles granted to that credential and how it was proven."""

    name: str
    roles: frozenset[Role]
    via: Via

    def has_any(self, roles: frozenset[Role]) -> bool:
        """Return True when the principal holds at least one of roles."""
        return not self.roles.isdisjoint(roles)


# With authentication off (loopback only) every caller is this principal.
ANONYMOUS = Principal("anonymous", ALL_ROLES, "anonymous")


def parse_role(name: str) -> Role:
    """Return the role named name, or raise ValueError listing the known roles."""
    try:
        return Role(name)
    except ValueError:
        raise ValueError(f"unknown role {name!r} (known: {', '.join(ROLE_NAMES)})") from None

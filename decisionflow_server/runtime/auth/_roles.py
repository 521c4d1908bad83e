"""Roles (the shared vocabulary's Role, re-exported), group names and the authenticated principal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# One definition, shared with the clients that read a caller's roles (GetCaller).
from decisionflow.vocabulary import GROUP_NAME, Role

__all__ = [
    "ALL_ROLES",
    "ANONYMOUS",
    "GROUP_NAME",
    "ROLE_NAMES",
    "Principal",
    "Role",
    "Via",
    "parse_group",
    "parse_role",
]

Via = Literal["token", "certificate", "oidc", "anonymous"]

ALL_ROLES: frozenset[Role] = frozenset(Role)
ROLE_NAMES: tuple[str, ...] = tuple(role.value for role in Role)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, with the roles granted to that credential, how it was proven and the groups
    it belongs to (each a valid group name)."""

    name: str
    roles: frozenset[Role]
    via: Via
    groups: frozenset[str] = frozenset()

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


def parse_group(name: str) -> str:
    """Return name if it is a valid group name, else raise ValueError saying what a group name is."""
    if not GROUP_NAME.fullmatch(name):
        raise ValueError(f"invalid group name {name!r} (1 to 64 of a-z 0-9 . _ -, starting with a letter or digit)")
    return name

"""The credentials file: bearer tokens, stored only as SHA-256 hashes, and the principals allowed
to authenticate with a verified client certificate.

    {"tokens": [{"principal": "alice", "sha256": "<lowercase hex>", "roles": ["reviewer"],
                 "groups": ["payments-leads"]}],
     "certificates": [{"principal": "orchestrator", "roles": ["effect_writer", "effect_reader"]}]}

``groups`` is optional in either kind of entry (absent: no group); review rules name the groups.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decisionflow_server.foundation import strict_json
from decisionflow_server.runtime.auth._roles import Principal, Role, parse_group, parse_role

StrPath = str | os.PathLike[str]

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# A principal is recorded as proposals.created_by and decisions.reviewer, VARCHAR(128): a longer
# name would be admitted and then fail every write it makes.
_MAX_PRINCIPAL_CHARS = 128
_ENTRY_FIELDS = {"tokens": ("principal", "sha256", "roles"), "certificates": ("principal", "roles")}
# Fields an entry may leave out; files written before groups existed stay valid.
_OPTIONAL_FIELDS = ("groups",)


class CredentialsError(ValueError):
    """The credentials file is unreadable or malformed; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One bearer token, known only by its hash, the roles it grants and its principal's groups."""

    principal: str
    sha256: str
    roles: frozenset[Role]
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class CertificateEntry:
    """A principal that authenticates with a verified client certificate (CN or SAN), and its groups."""

    principal: str
    roles: frozenset[Role]
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Credentials:
    """The validated content of a credentials file."""

    tokens: tuple[TokenEntry, ...] = ()
    certificates: tuple[CertificateEntry, ...] = ()

    def principal_for_token(self, token: str) -> Principal | None:
        """Return the principal whose stored hash matches token, or None."""
        digest = token_sha256(token).encode("ascii")
        found: TokenEntry | None = None
        for entry in self.tokens:
            # No early exit: every entry is compared, so timing does not tell which entry matched.
            if hmac.compare_digest(entry.sha256.encode("ascii"), digest):
                found = entry
        return None if found is None else Principal(found.principal, found.roles, "token", found.groups)

    def principal_for_certificate(self, names: Sequence[str]) -> Principal | None:
        """Return the principal of the first certificate name (CN, then SANs) listed, or None."""
        by_name = {entry.principal: entry for entry in self.certificates}
        for name in names:
            entry = by_name.get(name)
            if entry is not None:
                return Principal(entry.principal, entry.roles, "certificate", entry.groups)
        return None


def token_sha256(token: str) -> str:
    """Return the lowercase hex SHA-256 of the token's UTF-8 bytes, the form the file stores."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_principal_name(name: object, where: str = "principal") -> str:
    """Return name if it is a usable principal name, else raise CredentialsError."""
    if not isinstance(name, str) or not name:
        raise CredentialsError(f"{where}: must be a non-empty string")
    if len(name) > _MAX_PRINCIPAL_CHARS:
        raise CredentialsError(f"{where}: longer than {_MAX_PRINCIPAL_CHARS} characters")
    if name != name.strip() or not name.isprintable():
        raise CredentialsError(f"{where}: {name!r} has surrounding spaces or control characters")
    return name


def _roles(value: object, where: str) -> frozenset[Role]:
    if not isinstance(value, list) or not value:
        raise CredentialsError(f"{where}: must be a non-empty list of role names")
    roles: set[Role] = set()
    for index, name in enumerate(value):
        if not isinstance(name, str):
            raise CredentialsError(f"{where}[{index}]: must be a string")
        try:
            roles.add(parse_role(name))
        except ValueError as exc:
            raise CredentialsError(f"{where}[{index}]: {exc}") from None
    return frozenset(roles)


def _groups(value: object, where: str) -> frozenset[str]:
    if not isinstance(value, list):
        raise CredentialsError(f"{where}: must be a list of group names")
    first_index: dict[str, int] = {}
    for index, name in enumerate(value):
        if not isinstance(name, str):
            raise CredentialsError(f"{where}[{index}]: must be a string")
        try:
            parse_group(name)
        except ValueError as exc:
            raise CredentialsError(f"{where}[{index}]: {exc}") from None
        # A repeated group is most likely another group misspelt; refusing it keeps the file saying what was meant.
        if name in first_index:
            raise CredentialsError(f"{where}[{index}]: group {name!r} is listed twice (also at [{first_index[name]}])")
        first_index[name] = index
    return frozenset(value)


def _entries(document: dict[str, Any], key: str, source: str) -> Iterator[tuple[str, dict[str, Any]]]:
    entries = document.get(key, [])
    if not isinstance(entries, list):
        raise CredentialsError(f"{source}: {key!r} must be a list")
    fields = _ENTRY_FIELDS[key]
    for index, entry in enumerate(entries):
        where = f"{source}: {key}[{index}]"
        if not isinstance(entry, dict):
            raise CredentialsError(f"{where}: must be an object")
        missing = [field for field in fields if field not in entry]
        if missing:
            raise CredentialsError(f"{where}: missing field {missing[0]!r}")
        # Unknown fields are refused: a misspelt field must not silently change what a credential grants.
        unknown = sorted(set(entry) - set(fields) - set(_OPTIONAL_FIELDS))
        if unknown:
            raise CredentialsError(f"{where}: unknown field {unknown[0]!r}")
        yield where, entry


def parse_credentials(document: object, source: str = "credentials") -> Credentials:
    """Validate a decoded credentials document; raise CredentialsError naming the first fault."""
    if not isinstance(document, dict):
        raise CredentialsError(f"{source}: must be a JSON object with 'tokens' and 'certificates'")
    unknown = sorted(set(document) - set(_ENTRY_FIELDS))
    if unknown:
        raise CredentialsError(f"{source}: unknown key {unknown[0]!r} (expected 'tokens', 'certificates')")
    tokens: list[TokenEntry] = []
    first_use: dict[str, str] = {}
    for where, entry in _entries(document, "tokens", source):
        digest = entry["sha256"]
        if not isinstance(digest, str) or not _SHA256_HEX.fullmatch(digest):
            raise CredentialsError(f"{where}.sha256: must be 64 lowercase hex characters")
        if digest in first_use:
            raise CredentialsError(f"{where}.sha256: duplicate of {first_use[digest]}")
        first_use[digest] = where.removeprefix(f"{source}: ")
        principal = check_principal_name(entry["principal"], f"{where}.principal")
        roles, groups = _roles(entry["roles"], f"{where}.roles"), _groups(entry.get("groups", []), f"{where}.groups")
        tokens.append(TokenEntry(principal, digest, roles, groups))
    certificates: list[CertificateEntry] = []
    seen: set[str] = set()
    for where, entry in _entries(document, "certificates", source):
        principal = check_principal_name(entry["principal"], f"{where}.principal")
        if principal in seen:
            raise CredentialsError(f"{where}.principal: {principal!r} is listed twice")
        seen.add(principal)
        roles, groups = _roles(entry["roles"], f"{where}.roles"), _groups(entry.get("groups", []), f"{where}.groups")
        certificates.append(CertificateEntry(principal, roles, groups))
    return Credentials(tuple(tokens), tuple(certificates))


def _read_document(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialsError(f"{path}: cannot read credentials file: {exc.strerror}") from exc
    try:
        return strict_json.loads(text)
    except strict_json.StrictJSONError as exc:
        # A repeated key would leave which roles were meant to a guess.
        if exc.duplicate_key is not None:
            raise CredentialsError(f"{path}: {exc}") from None
        raise CredentialsError(f"{path}: not valid JSON: {exc}") from None


def load_credentials(path: StrPath) -> Credentials:
    """Read and validate a credentials file; raise CredentialsError if it is unreadable or malformed."""
    file = Path(path)
    return parse_credentials(_read_document(file), str(file))


@contextlib.contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    # Two writers appending at once would each replace the file with their own copy and one token
    # would be lost; an exclusive lock on the directory serialises them without a lock file.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_atomically(path: Path, text: str) -> None:
    # A file being replaced keeps its group and its group's read access, so services reading it
    # through their group (deploy/make-secrets.sh's contract) still can; others never keep any
    # access and nobody but the owner may write. A new file is private to its owner.
    try:
        previous: os.stat_result | None = path.stat()
    except FileNotFoundError:
        previous = None
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            if previous is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(file.fileno(), -1, previous.st_gid)
            group_read = 0 if previous is None else previous.st_mode & stat.S_IRGRP
            os.fchmod(file.fileno(), 0o600 | group_read)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)  # the rename itself survives a crash only once the directory is synced
    finally:
        os.close(directory)


def issue_token(path: StrPath, principal: str, roles: Iterable[Role], groups: Sequence[str] = ()) -> str:
    """Generate a token, append its hash (with the principal's roles and groups) to the credentials
    file (created mode 0600 if absent, else replaced atomically with mode 0600 plus the group read
    access and the group it had; a symlink is followed and kept) and return the token, which is
    stored nowhere. Bad input raises CredentialsError and leaves the file as it was."""
    check_principal_name(principal)
    granted = set(roles)
    if not granted:
        raise CredentialsError("a token needs at least one role")
    _groups(groups if isinstance(groups, str) else list(groups), "groups")  # one string is no list of groups
    # A symlinked file is written through: the link's target is replaced and the link stays.
    file = Path(os.path.realpath(path))
    token = secrets.token_urlsafe(32)
    entry = {
        "principal": principal,
        "sha256": token_sha256(token),
        "roles": [role.value for role in Role if role in granted],
    }
    if groups:
        entry["groups"] = list(groups)  # an entry without groups keeps the shape older files have
    with _directory_lock(file.parent.resolve()):
        document = _read_document(file) if file.exists() else {"tokens": [], "certificates": []}
        parse_credentials(document, str(file))  # never rewrite a file that is already malformed
        assert isinstance(document, dict)
        document.setdefault("tokens", []).append(entry)
        parse_credentials(document, str(file))
        _write_atomically(file, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return token

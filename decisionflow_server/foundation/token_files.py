"""Reading a bearer token from a file, and refusing a file that someone else could have written.

A token file decides the identity every call is made as. Whoever can write it can swap in a token of
their own, so a command would approve, decline or re-drive as someone its user never chose. So, as
ssh does with keys and StrictModes:

| the file is writable by | read? |
|---|---|
| its owner only | yes |
| its group, if the owner's private group (named as the owner, no other members; umask 002) | yes |
| any other group | no: one-line error naming the group and the mode |
| everyone (world-writable) | no: one-line error |

Reading it is allowed to the group (the containers read their secrets through a group). A symbolic
link is followed and the file it names is checked (Kubernetes mounts secrets as links).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from decisionflow.bearer import bearer_metadata


def _private_group(uid: int, gid: int) -> bool:
    """Whether gid is uid's user-private group: same name as the user, no other member listed."""
    try:
        owner = pwd.getpwuid(uid).pw_name
        group = grp.getgrgid(gid)
    except KeyError:
        return False  # a number without a name: nothing says who else is in it
    return group.gr_name == owner and set(group.gr_mem) <= {owner}


def writable_by_others(status: os.stat_result) -> str | None:
    """Return who besides the owner may write a file with this status ("everyone", "group NAME"), or None."""
    if status.st_mode & stat.S_IWOTH:
        return "everyone"
    if status.st_mode & stat.S_IWGRP and not _private_group(status.st_uid, status.st_gid):
        try:
            return f"group {grp.getgrgid(status.st_gid).gr_name}"
        except KeyError:
            return f"group {status.st_gid}"
    return None


def read_token_file(value: str) -> str:
    """Return the bearer token held in the file at value: UTF-8, surrounding whitespace stripped,
    non-empty printable text without spaces, in a file no one but its owner (and the owner's private
    group) may write; anything else raises ValueError with a one-line reason that never quotes the file."""
    file = Path(value)
    try:
        with file.open("rb") as opened:
            status = os.fstat(opened.fileno())
            content = opened.read()
    except OSError as exc:
        raise ValueError(f"cannot read token file {value!r}: {exc.strerror or exc}") from None
    others = writable_by_others(status)
    if others is not None:
        raise ValueError(
            f"token file {value!r} is writable by {others} (mode {stat.S_IMODE(status.st_mode):04o}): "
            f"whoever can write it chooses who your calls are made as; run chmod go-w on it"
        )
    try:
        token = content.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"token file {value!r} is not UTF-8 text") from None
    try:
        bearer_metadata(token)
    except ValueError as exc:
        raise ValueError(f"token file {value!r}: {exc}") from None
    return token

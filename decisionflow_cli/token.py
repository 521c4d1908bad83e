"""``decisionflow token new``: issue a bearer token and record only its hash in a credentials file."""

from __future__ import annotations

import argparse
import sys

from decisionflow_cli.command import CommandError, Subparsers
from decisionflow_server.runtime.auth import ROLE_NAMES, Role, issue_token, parse_role


def register(subparsers: Subparsers) -> None:
    """Add ``token new``."""
    parser = subparsers.add_parser(
        "token",
        help="issue bearer tokens",
        description="Manage the bearer tokens of a credentials file (stored as SHA-256 hashes only).",
    )
    commands = parser.add_subparsers(dest="token_command", metavar="SUBCOMMAND", required=True)
    new_parser = commands.add_parser(
        "new",
        help="issue a token for a principal and print it once",
        description=(
            "Generate a random token, append its hash with the principal, roles and groups to the credentials "
            "file (created with mode 0600 if absent; else replaced atomically, mode 0600 plus the group read "
            "access and the group it had, and through a symbolic link, which stays) and print the token once."
        ),
    )
    new_parser.add_argument("--principal", required=True, metavar="NAME", help="who the token authenticates")
    new_parser.add_argument(
        "--role",
        dest="roles",
        action="append",
        required=True,
        metavar="ROLE",
        help=f"a role the token grants; repeat for several ({', '.join(ROLE_NAMES)})",
    )
    new_parser.add_argument(
        "--group",
        dest="groups",
        action="append",
        default=[],
        metavar="GROUP",
        help="a group the principal belongs to, as review rules name it; repeat for several "
        "(1 to 64 of a-z 0-9 . _ -, starting with a letter or digit)",
    )
    new_parser.add_argument("--file", required=True, metavar="PATH", help="the credentials file (JSON)")
    new_parser.set_defaults(func=_run_new)


def _run_new(args: argparse.Namespace) -> int:
    try:
        roles: list[Role] = [parse_role(name) for name in args.roles]
        token = issue_token(args.file, args.principal, roles, args.groups)
    except ValueError as exc:  # CredentialsError included
        raise CommandError(str(exc)) from exc
    except OSError as exc:
        raise CommandError(f"cannot write {args.file!r}: {exc.strerror or exc}", exit_code=1) from exc
    # The token is shown this once; the file keeps only its hash.
    sys.stdout.write(token + "\n")
    return 0

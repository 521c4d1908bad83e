"""The audit log's commands: ``decisionflow-orchestrator audit-checkpoint`` (sequence, sign and publish
once) and ``audit-keygen`` (a new signing key file, and the verifier key auditors keep).

``audit-checkpoint`` exits 1 when it would not sign because the log does not extend the checkpoint
published in ``--audit-publish-dir`` (what it sequenced stays sequenced), or the database is unavailable.

Each prints one JSON line on stdout for scripts and one line for a person on stderr, as the
housekeeping commands do (decisionflow_server.runtime.housekeeping_commands).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import Engine

from decisionflow_server.foundation import arguments, logs
from decisionflow_server.foundation.errors import Unavailable
from decisionflow_server.foundation.settings import SettingError, add_settings, parse_settings
from decisionflow_server.runtime import housekeeping_commands
from decisionflow_server.runtime.host import Command
from decisionflow_server.storage import migrating
from orchestrator import config as configuration
from orchestrator.audit.publication import CheckpointDirectory
from orchestrator.audit.sequencer import publish
from orchestrator.audit_log.ports import PublishedCheckpoint
from orchestrator.audit_log.signing import write_new_key
from orchestrator.store import OrchestratorStore

logger = logging.getLogger("decisionflow.orchestrator")

CHECKPOINT = "audit-checkpoint"
KEYGEN = "audit-keygen"
DESCRIPTIONS = {
    CHECKPOINT: "sequence the audit log's new entries and sign a checkpoint of it now (with the signing key, if "
    "set) and publish it (to --audit-publish-dir, if set), as the server does every --audit-interval-seconds; "
    "prints the newest checkpoint; exit 1 when the log does not extend the published checkpoint",
    KEYGEN: "write a new Ed25519 signing key for the audit log's checkpoints to a new file, and print the "
    "verifier key auditors keep",
}


def _checkpoint_json(checkpoint: PublishedCheckpoint | None) -> dict[str, object] | None:
    if checkpoint is None:
        return None
    return {
        "size": checkpoint.size,
        "root_hash": base64.b64encode(checkpoint.root_hash).decode(),
        "signed_at": checkpoint.signed_at.isoformat(),
        "signed_note": checkpoint.signed_note,
    }


def audit_checkpoint(args: list[str], schema: migrating.Schema) -> int:
    """Run ``audit-checkpoint``; return the exit status (2 for usage, as argparse does)."""
    cli = arguments.ArgumentParser(prog=f"{schema.program} {CHECKPOINT}", description=DESCRIPTIONS[CHECKPOINT])
    add_settings(cli, configuration.AUDIT_SETTINGS)
    ns = cli.parse_args(args)
    try:
        values = parse_settings(ns, configuration.AUDIT_SETTINGS, os.environ)
        database_url = values.required_one_of(configuration.DATABASE_URL, configuration.SERVER.database_url_file)
        signer = configuration.audit_signer(values)
        publish_dir: Path | None = values[configuration.AUDIT_PUBLISH_DIR]
    except SettingError as error:
        cli.error(str(error))
    level = values.required(configuration.SERVER.logs.level)
    logs.configure(level)

    def work(engine: Engine) -> int:
        store = OrchestratorStore(engine)
        try:
            directory = None if publish_dir is None else CheckpointDirectory(publish_dir)
            done = publish(store, signer, lambda: datetime.now(UTC), directory=directory)
            latest = store.latest_checkpoint()
        except Unavailable as error:
            # What was sequenced stays sequenced; running the command again finishes the work.
            logger.error("%s: %s", CHECKPOINT, error, extra={"service": "orchestrator"})
            return 1
        report = {
            "command": CHECKPOINT,
            "sequenced": done.sequenced,
            "size": done.size,
            "signed": done.signed is not None,
            "published": done.published is not None,
            "refused": None if done.refused is None else done.refused.reason,
            "checkpoint": _checkpoint_json(latest),
        }
        print(json.dumps(report))
        if done.refused is not None:
            print(
                f"sequenced {done.sequenced} entries; the log holds {done.size}; signed nothing: "
                f'{done.refused.reason} (docs/operations.md, "After restoring the orchestrator\'s database")',
                file=sys.stderr,
            )
            return 1
        if signer is None:
            said = "no checkpoint signed: no --audit-signing-key-file"
        elif done.signed is None:
            said = "no new checkpoint: the newest one already covers the log"
        else:
            said = f"signed the checkpoint of size {done.signed.size}"
        print(f"sequenced {done.sequenced} entries; the log holds {done.size}; {said}", file=sys.stderr)
        return 0

    return housekeeping_commands.on_existing_database(
        schema, CHECKPOINT, database_url, work, logger, debug=level == "debug"
    )


def audit_keygen(args: list[str]) -> int:
    """Run ``audit-keygen``; return the exit status (1 when the file exists or cannot be written)."""
    cli = arguments.ArgumentParser(prog=f"decisionflow-orchestrator {KEYGEN}", description=DESCRIPTIONS[KEYGEN])
    cli.add_argument("--out", type=Path, required=True, help="the key file to create (never overwritten; mode 0600)")
    add_settings(cli, (configuration.AUDIT_ORIGIN,))
    cli.add_argument("--name", help="the key's name (default: --audit-origin, the name auditors expect)")
    ns = cli.parse_args(args)
    try:
        origin = parse_settings(ns, (configuration.AUDIT_ORIGIN,), os.environ).required(configuration.AUDIT_ORIGIN)
    except SettingError as error:
        cli.error(str(error))
    try:
        signer = write_new_key(ns.out, ns.name or origin)
    except FileExistsError:
        print(f"{KEYGEN}: {ns.out} exists; a key file is never overwritten", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{KEYGEN}: cannot write {ns.out}: {error.strerror or error}", file=sys.stderr)
        return 1
    except ValueError as error:
        cli.error(f"--name: {error}")
    vkey = signer.verifier().vkey
    print(json.dumps({"command": KEYGEN, "key_file": str(ns.out), "name": signer.name, "vkey": vkey}))
    print(f"wrote the signing key to {ns.out}; give auditors the verifier key {vkey}", file=sys.stderr)
    return 0


def commands(schema: migrating.Schema) -> Mapping[str, Command]:
    """The audit log's commands of the orchestrator's command line."""
    return {CHECKPOINT: lambda args: audit_checkpoint(args, schema), KEYGEN: audit_keygen}

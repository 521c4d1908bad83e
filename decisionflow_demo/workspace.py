"""The demo's state directory: databases, the credentials file and one token file per principal,
the checkpoint key, the review rules file, the proposal files the commands read, the logs of every
child process, and the audit log's keys and bundle once step 6 has made them."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decisionflow_server.runtime.auth import Role, issue_token

AUTHOR, REVIEWER, OPERATOR, ORCHESTRATOR, NAIVE_CLIENT = "ava", "rita", "ops", "orchestrator", "naive-client"
AUDITOR = "audra"
# The three support leads of step 7: reviewers who hold the group its review rule names.
LEADS_GROUP = "leads"
LEADS = ("lena", "liam", "luca")
# The reconciler's token for the receiver: the receiver never sees a token the orchestrator takes as operator.
RECONCILER_READER = "reconciler"

PRINCIPALS: dict[str, tuple[Role, ...]] = {
    AUTHOR: (Role.AUTHOR,),
    REVIEWER: (Role.REVIEWER,),
    OPERATOR: (Role.OPERATOR, Role.EFFECT_READER),
    AUDITOR: (Role.AUDITOR,),
    RECONCILER_READER: (Role.EFFECT_READER,),
    ORCHESTRATOR: (Role.EFFECT_WRITER, Role.EFFECT_READER),
    # The control experiment's client writes effects directly, as a service without idempotency would.
    NAIVE_CLIENT: (Role.EFFECT_WRITER,),
    **{lead: (Role.REVIEWER,) for lead in LEADS},
}
GROUPS: dict[str, tuple[str, ...]] = {lead: (LEADS_GROUP,) for lead in LEADS}

CASE_ID = "T-1042"
AUDIT_SIGNING_KEY, AUDIT_VERIFIER_KEY = "audit-signing.key", "audit-log.vkey"
AUDIT_BUNDLE, AUDIT_TAMPERED = f"{CASE_ID}.audit.json", f"{CASE_ID}.tampered.json"
AUDIT_PUBLISHED, AUDIT_MONITOR_STATE = "audit-published", "audit-monitor.checkpoint"
STALE_CASE_ID = "T-1043"
CONTROL_CASE_ID = "T-1042-control"
QUORUM_CASE_ID = "T-1044"
# Step 8's case: a service starts it and waits for its outcome.
WAITING_CASE_ID = "T-1045"
ACTION = "record_support_review"
REVIEW_RULES = "review-rules.toml"
# The orchestrators start with this file in force: no action has its own rule, so every review follows
# the default rule until step 7 writes QUORUM_RULE and sends SIGHUP.
NO_RULES = "version = 1\n# No action has its own rule yet: every review follows the default rule.\n"
QUORUM_RULE = f"""\
version = 1

[[actions.{ACTION}.stages]]
name = "{LEADS_GROUP}"
groups = ["{LEADS_GROUP}"]
approvals = 2
"""

BODY = (
    "Thanks for the detailed report. This is a known firmware issue: devices on 4.2.0 can hold at boot "
    "after a power cut (HOLD-7). Firmware 4.2.1 fixes it; please update, and if the hold happens again, "
    "send us the diagnostic export."
)
STALE_BODY = (
    "Thanks for writing in. The boot hold you describe is the known firmware issue HOLD-7; updating to "
    "firmware 4.2.1 resolves it."
)
QUORUM_BODY = (
    "Thanks for the follow-up. Your device still holds at boot after the update to firmware 4.2.1 (HOLD-7), "
    "so we are replacing it under warranty: a prepaid label for the old unit is attached, and the new one "
    "ships within two working days."
)
WAITING_BODY = (
    "Thanks for your patience. The replacement unit for your device has shipped; the tracking number is in "
    "the attached label, and the old unit can go back in the same box."
)
HOLD_QUOTATION = "Firmware 4.2.0 may hold at boot after a power cut; fixed in 4.2.1."
POLICY: dict[str, Any] = {
    "name": "support-replies",
    "version_label": "2026-10",
    "allowance_units": 9,
    "rules": {},
}


def evidence(hold_version: int) -> list[dict[str, Any]]:
    """The two sources of the demo's replies, with the HOLD-7 source at hold_version (same quotation)."""
    return [
        {"source_id": "HOLD-7", "version": hold_version, "quotation": HOLD_QUOTATION},
        {"source_id": "KB-12", "version": 1, "quotation": "Update to firmware 4.2.1 from Settings > System."},
    ]


@dataclass(frozen=True)
class Workspace:
    """Where everything of one demo run lives."""

    root: Path
    orchestrator_url: str
    receiver_url: str
    credentials: Path
    checkpoint_keys: Path

    @property
    def logs(self) -> Path:
        """Directory of the child processes' logs and port files."""
        return self.root / "logs"

    @property
    def inputs(self) -> Path:
        """Directory of the proposal files the review commands read."""
        return self.root / "inputs"

    def token_file(self, principal: str) -> Path:
        """The file holding principal's bearer token."""
        return self.root / "tokens" / f"{principal}.token"

    def token(self, principal: str) -> str:
        """principal's bearer token, read from its file."""
        return self.token_file(principal).read_text(encoding="utf-8").strip()

    @property
    def review_rules(self) -> Path:
        """The orchestrators' review rules file (--review-rules-file), read again on SIGHUP."""
        return self.root / REVIEW_RULES

    def input(self, name: str) -> Path:
        """The path of one input file."""
        return self.inputs / name

    @property
    def audit_signing_key(self) -> Path:
        """The audit log's signing key file (step 6 makes it with audit-keygen)."""
        return self.root / AUDIT_SIGNING_KEY

    @property
    def audit_verifier_key(self) -> Path:
        """The verifier key an auditor keeps, the only thing verify needs besides the bundle."""
        return self.root / AUDIT_VERIFIER_KEY

    @property
    def audit_bundle(self) -> Path:
        """The bundle of T-1042's leaves that step 6 exports and verifies."""
        return self.root / AUDIT_BUNDLE

    @property
    def audit_published(self) -> Path:
        """The directory the audit log's checkpoints are published to, outside the database (step 6)."""
        return self.root / AUDIT_PUBLISHED

    @property
    def audit_monitor_state(self) -> Path:
        """The last checkpoint the demo's monitor saw."""
        return self.root / AUDIT_MONITOR_STATE

    @property
    def audit_tampered(self) -> Path:
        """Step 6's copy of the bundle with a leaf changed, which verify refuses."""
        return self.root / AUDIT_TAMPERED


def _state_dir(path: Path | None) -> Path:
    if path is None:
        return Path(tempfile.mkdtemp(prefix="decisionflow-demo-"))
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        # An earlier run's databases would already hold the demo's cases and effects.
        raise ValueError(f"--state-dir {path} must be an empty directory or not exist yet")
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_private(path: Path, text: str) -> None:
    """Write text to path (its folder made if needed), readable and writable by its owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)


def _write_json(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def prepare(state_dir: Path | None, orchestrator_url: str | None, receiver_url: str | None) -> Workspace:
    """Create the state directory with tokens, key and inputs; raise ValueError if it is not fresh."""
    root = _state_dir(state_dir).resolve()
    workspace = Workspace(
        root=root,
        orchestrator_url=orchestrator_url or f"sqlite:///{root / 'orchestrator.db'}",
        receiver_url=receiver_url or f"sqlite:///{root / 'receiver.db'}",
        credentials=root / "credentials.json",
        checkpoint_keys=root / "checkpoint-keys",
    )
    workspace.logs.mkdir()
    for principal, roles in PRINCIPALS.items():
        token = issue_token(workspace.credentials, principal, roles, GROUPS.get(principal, ()))
        write_private(workspace.token_file(principal), token + "\n")
    write_private(workspace.checkpoint_keys, secrets.token_urlsafe(32) + "\n")
    workspace.review_rules.write_text(NO_RULES, encoding="utf-8")
    _write_json(
        workspace.input(f"{CASE_ID}.json"),
        {"case_id": CASE_ID, "action": ACTION, "body": BODY, "evidence": evidence(2), "policy": POLICY},
    )
    _write_json(
        workspace.input(f"{STALE_CASE_ID}.json"),
        {"case_id": STALE_CASE_ID, "action": ACTION, "body": STALE_BODY, "evidence": evidence(2), "policy": POLICY},
    )
    _write_json(
        workspace.input(f"{STALE_CASE_ID}-edit.json"),
        {"body": STALE_BODY, "evidence": evidence(4), "policy": POLICY},
    )
    _write_json(
        workspace.input(f"{QUORUM_CASE_ID}.json"),
        {"case_id": QUORUM_CASE_ID, "action": ACTION, "body": QUORUM_BODY, "evidence": evidence(2), "policy": POLICY},
    )
    _write_json(
        workspace.input(f"{WAITING_CASE_ID}.json"),
        {"case_id": WAITING_CASE_ID, "action": ACTION, "body": WAITING_BODY, "evidence": evidence(2), "policy": POLICY},
    )
    return workspace

"""Step 6 of docs/demo.md: the audit log as an auditor checks it. The log's key is made with
``audit-keygen``, a checkpoint signed with ``audit-checkpoint`` and published outside the database,
kept by ``decisionflow audit monitor``, T-1042's leaves exported as the auditor and verified with
nothing but the verifier key, and a copy of the bundle whose decision names another reviewer shown
refused."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

from decisionflow.audit_bundle import Bundle, MalformedBundle, dump_bundle, load_bundle
from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    Leaf,
    ProposalLeaf,
    SettlementLeaf,
    TransparencyError,
    decode_leaf,
    encode_leaf,
)
from decisionflow_demo import workspace as ws
from decisionflow_demo.children import DemoError, Finished
from decisionflow_demo.stack import DemoStack, short

EXIT_LEAF_REFUSED = 1  # decisionflow audit verify: a leaf or record does not hold
FORGED_REVIEWER = "mallory"


class AuditTrail:
    """Runs the audit commands against the demo's orchestrator and says what they showed."""

    def __init__(self, stack: DemoStack) -> None:
        self.stack = stack
        self.ws = stack.ws
        self.say = stack.say

    def shows(self, operation_id: str, receipt_id: str) -> bool:
        """True when the exported leaves of operation_id verify and say who proposed, approved and settled it
        (with receipt_id), the published checkpoint is kept by the monitor, and the tampered copy is refused."""
        self._sign()
        monitored = self._monitor()
        exported = self.stack.review(
            "audit",
            ["export", "--operation", operation_id, "--out", str(self.ws.audit_bundle)],
            ws.AUDITOR,
            f"export --operation {short(operation_id)} --out {ws.AUDIT_BUNDLE}",
        )
        self.say.line(f"-> exit {exported.exit_code}: {exported.message}")
        verified = self._verify(self.ws.audit_bundle)
        proof = verified.document
        if verified.exit_code != 0 or proof.get("verified") is not True:
            self.say.line(f"-> NOT verified, exit {verified.exit_code}: {proof.get('reason') or verified.message}")
            return False
        key = "+".join(str(proof.get("key", "")).split("+")[:2])
        self.say.line(
            f"-> verified, exit 0: checkpoint {proof.get('tree_size')} of {proof.get('origin')} signed by {key}; "
            f"{proof.get('leaves')} leaves proven included; {proof.get('records')} orchestrator record agrees"
        )
        bundle = self._bundle()
        leaves = [(leaf.index, _decoded(leaf.data)) for leaf in bundle.leaves]
        for index, leaf in leaves:
            self.say.line(f"   leaf {index}: {_said(leaf)}")
        told = [_said(leaf) for _, leaf in leaves] == [
            f"proposal of {ws.CASE_ID} by {ws.AUTHOR}",
            f"decision APPROVE by {ws.REVIEWER}",
            f"settlement COMMITTED by {ws.OPERATOR}, receipt {receipt_id}",
        ]
        return told and monitored and self._tampered_is_refused(bundle)

    def _sign(self) -> None:
        """Make the log's key, keep its verifier key as an auditor would, and sign a checkpoint now."""
        made = self._orchestrator_command(
            ["audit-keygen", "--out", str(self.ws.audit_signing_key)], f"audit-keygen --out {ws.AUDIT_SIGNING_KEY}"
        )
        vkey = str(made.document.get("vkey", ""))
        if made.exit_code != 0 or not vkey:
            raise DemoError(f"audit-keygen failed (exit {made.exit_code}): {made.message}")
        self.ws.audit_verifier_key.write_text(vkey + "\n", encoding="utf-8")
        self.say.line(f"-> the verifier key auditors keep, in {ws.AUDIT_VERIFIER_KEY}: {vkey}")
        signed = self._orchestrator_command(
            [
                "audit-checkpoint",
                "--database-url",
                self.ws.orchestrator_url,
                "--audit-signing-key-file",
                str(self.ws.audit_signing_key),
                "--audit-publish-dir",
                str(self.ws.audit_published),
            ],
            f"audit-checkpoint --audit-signing-key-file {ws.AUDIT_SIGNING_KEY} "
            f"--audit-publish-dir {ws.AUDIT_PUBLISHED}",
            "now; a server given the key signs on its interval",
        )
        self.say.line(f"-> {signed.message}; published in {ws.AUDIT_PUBLISHED}/checkpoint")

    def _monitor(self) -> bool:
        """The monitor keeps the published checkpoint, as a witness would before checking the next by proof."""
        published = self.ws.audit_published / "checkpoint"
        self.say.line(
            f"$ decisionflow audit monitor --checkpoint {ws.AUDIT_PUBLISHED}/checkpoint "
            f"--state {ws.AUDIT_MONITOR_STATE} --public-key {ws.AUDIT_VERIFIER_KEY}"
        )
        argv = [
            *("audit", "monitor", "--checkpoint", str(published), "--state", str(self.ws.audit_monitor_state)),
            *("--public-key", str(self.ws.audit_verifier_key)),
        ]
        monitored = self.stack.children.run("decisionflow_cli", argv)
        said = monitored.message.replace(str(self.ws.audit_monitor_state), ws.AUDIT_MONITOR_STATE)
        self.say.line(f"-> exit {monitored.exit_code}: {said}")
        return monitored.exit_code == 0

    def _tampered_is_refused(self, bundle: Bundle) -> bool:
        """A copy of the bundle whose decision names another reviewer: verify must refuse it."""
        forged = []
        for leaf in bundle.leaves:
            decoded = _decoded(leaf.data)
            if isinstance(decoded, DecisionLeaf):
                changed = encode_leaf(dataclasses.replace(decoded, principal=FORGED_REVIEWER))
                forged.append(dataclasses.replace(leaf, data=base64.b64encode(changed).decode("ascii")))
            else:
                forged.append(leaf)
        self.say.line(f"a copy, {ws.AUDIT_TAMPERED}: its decision leaf names {FORGED_REVIEWER}, not {ws.REVIEWER}")
        self.ws.audit_tampered.write_text(dump_bundle(dataclasses.replace(bundle, leaves=tuple(forged))), "utf-8")
        refused = self._verify(self.ws.audit_tampered)
        reason = refused.document.get("reason") or refused.message
        self.say.line(f"-> refused, exit {refused.exit_code}: {refused.document.get('where')}: {reason}")
        return refused.exit_code == EXIT_LEAF_REFUSED and refused.document.get("verified") is False

    def _verify(self, bundle: Path) -> Finished:
        self.say.line(f"$ decisionflow audit verify {bundle.name} --public-key {ws.AUDIT_VERIFIER_KEY} --json")
        argv = ["audit", "verify", str(bundle), "--public-key", str(self.ws.audit_verifier_key), "--json"]
        return self.stack.children.run("decisionflow_cli", argv)

    def _orchestrator_command(self, args: list[str], shown: str, note: str = "") -> Finished:
        self.say.line(f"$ decisionflow-orchestrator {shown}" + (f"   ({note})" if note else ""))
        return self.stack.children.run("orchestrator.main", args)

    def _bundle(self) -> Bundle:
        """The exported bundle, read back."""
        try:
            return load_bundle(self.ws.audit_bundle.read_text(encoding="utf-8"))
        except (OSError, MalformedBundle) as error:
            raise DemoError(f"{ws.AUDIT_BUNDLE} cannot be read back: {error}") from error


def _decoded(data: str) -> Leaf:
    """A bundle leaf's base64 bytes, decoded (verify has checked each)."""
    try:
        return decode_leaf(base64.b64decode(data))
    except (TransparencyError, ValueError) as error:
        raise DemoError(f"{ws.AUDIT_BUNDLE} holds a leaf that does not decode: {error}") from error


def _said(leaf: Leaf) -> str:
    """One leaf in a line: its kind, what it records and who."""
    if isinstance(leaf, ProposalLeaf):
        return f"proposal of {leaf.case_id} by {leaf.principal}"
    if isinstance(leaf, DecisionLeaf):
        return f"decision {leaf.decision} by {leaf.principal}"
    if isinstance(leaf, SettlementLeaf):
        return f"settlement {leaf.state} by {leaf.principal}, receipt {leaf.receipt_id}"
    if isinstance(leaf, EffectLeaf):
        return f"effect, receipt {leaf.receipt_id}"
    return type(leaf).__name__.removesuffix("Leaf").lower()

"""The audit log's checkpoint signer: an Ed25519 note key of its own, read from its key file.

The key file holds one signer key string, as Go's golang.org/x/mod/sumdb/note writes them
(``PRIVATE+KEY+<name>+<key id>+<base64(0x01 || seed)>``); ``decisionflow-orchestrator audit-keygen``
makes one and prints the verifier key (``<name>+<key id>+<base64(0x01 || public key)>``) that
auditors keep. Its key id is in every signature line, so a log can move to a new key and an auditor
tell which key signed which checkpoint. It is never the workflow checkpoints' HMAC keys.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from decisionflow.transparency import ED25519, EMPTY_ROOT, Checkpoint, NoteSigner, sign_checkpoint

DEFAULT_ORIGIN = "decisionflow.local/audit"


def origin(value: str) -> str:
    """Return value if it is a checkpoint origin: one non-empty line without control characters."""
    Checkpoint(value, 0, EMPTY_ROOT)  # raises MalformedCheckpoint, a ValueError, naming what is wrong
    return value


def signing_key(value: str) -> NoteSigner:
    """Return the signer of a key string ``PRIVATE+KEY+name+keyid+base64``; ValueError (never quoting
    the key) when it is not one."""
    try:
        return NoteSigner.from_skey(value)
    except ValueError as exc:
        # The message describes the shape (MalformedKey never quotes the key material).
        raise ValueError(f"not an audit signing key (PRIVATE+KEY+<name>+<key id>+<key>): {exc}") from None


def key_id_text(key_id: int) -> str:
    """A key id as it is stored and shown: 8 lowercase hex digits."""
    return f"{key_id:08x}"


@dataclass(frozen=True)
class CheckpointSigner:
    """Signs the log's checkpoints under origin with key."""

    origin: str
    key: NoteSigner

    @property
    def key_id(self) -> str:
        """The signing key's id, 8 hex digits, as its signature lines and the checkpoints table carry it."""
        return key_id_text(self.key.key_id)

    @property
    def vkey(self) -> str:
        """The verifier key string an auditor needs to open these checkpoints."""
        return self.key.verifier().vkey

    def sign(self, size: int, root_hash: bytes) -> str:
        """The signed note of the checkpoint of size leaves with root_hash."""
        return sign_checkpoint(Checkpoint(self.origin, size, root_hash), self.key)


def signer_key_string(signer: NoteSigner) -> str:
    """The key file's text of signer: ``PRIVATE+KEY+<name>+<key id>+<base64(0x01 || seed)>``."""
    seed = signer.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    encoded = base64.b64encode(bytes([ED25519]) + seed).decode()
    return f"PRIVATE+KEY+{signer.name}+{key_id_text(signer.key_id)}+{encoded}"


def write_new_key(path: Path, name: str) -> NoteSigner:
    """Create a new Ed25519 signing key named name in a new file at path (mode 0600; an existing file is
    never overwritten: FileExistsError) and return it."""
    signer = NoteSigner(name, Ed25519PrivateKey.generate())  # MalformedKey (a ValueError) for a bad name
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as key_file:
        key_file.write(signer_key_string(signer) + "\n")
    return signer

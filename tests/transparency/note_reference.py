"""Signed-note signing written from c2sp.org/signed-note alone, for the worked example of
docs/audit-log.md: Ed25519 from the cryptography package and the line format by hand, sharing no
code with decisionflow.transparency."""

from __future__ import annotations

import base64
import hashlib

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


def public_key(seed: bytes) -> bytes:
    """The raw Ed25519 public key of a 32-byte seed."""
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(name: str, seed: bytes) -> bytes:
    """The 4-byte key id: SHA-256(name || 0x0A || 0x01 || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\x0a\x01" + public_key(seed)).digest()[:4]


def vkey(name: str, seed: bytes) -> str:
    """The verifier key string name+hex(key id)+base64(0x01 || public key)."""
    material = base64.b64encode(b"\x01" + public_key(seed)).decode()
    return f"{name}+{key_id(name, seed).hex()}+{material}"


def signed_note(text: str, name: str, seed: bytes) -> str:
    """text, a blank line, and the one signature line of the key."""
    signature = Ed25519PrivateKey.from_private_bytes(seed).sign(text.encode())
    return f"{text}\n\u2014 {name} {base64.b64encode(key_id(name, seed) + signature).decode()}\n"

"""Ed25519 note keys (c2sp.org/signed-note): key ids, verifier keys, signers.

    key id       = first 4 bytes, big-endian, of SHA-256(name || 0x0A || 0x01 || 32-byte public key)
    verifier key = <name>+<key id as 8 lowercase hex digits>+base64(0x01 || public key)
    signer key   = PRIVATE+KEY+<name>+<key id>+base64(0x01 || 32-byte seed)

The verifier key is what an auditor is given and keeps; the strings are the ones Go's
golang.org/x/mod/sumdb/note writes and reads (NewVerifier, NewSigner), so either side can use
keys made by the other. 0x01 is the signature type of Ed25519; no other type is accepted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from decisionflow.transparency._errors import MalformedKey

ED25519 = 0x01
"""The signature type byte of Ed25519 in key ids and key strings."""

_KEY_SIZE = 32
_KEY_ID_HEX = re.compile(r"[0-9a-fA-F]{8}")


def is_key_name(name: str) -> bool:
    """True for a valid key name: non-empty, without Unicode spaces or '+'."""
    return bool(name) and "+" not in name and not any(character.isspace() for character in name)


def key_id(name: str, public_key: bytes) -> int:
    """The key id of an Ed25519 public key under name: SHA-256(name, LF, 0x01, key), first 4 bytes."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ED25519]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True, slots=True)
class NoteVerifier:
    """A trusted Ed25519 key under its name: what checks a note's signature."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        if not is_key_name(self.name):
            raise MalformedKey(f"{self.name!r} is not a key name (empty, a space or a '+')")
        if len(self.public_key) != _KEY_SIZE:
            raise MalformedKey(f"an Ed25519 public key is 32 bytes, not {len(self.public_key)}")

    @classmethod
    def from_vkey(cls, vkey: str) -> NoteVerifier:
        """The verifier of a key string name+keyid+base64(0x01 || public key); its key id must match."""
        name, hex_id, encoded = _fields(vkey, 3, "name+keyid+key")
        material = _material(encoded)
        verifier = cls(name, material)
        _check_id(hex_id, verifier.key_id)
        return verifier

    @property
    def key_id(self) -> int:
        """The key id that signature lines of this key carry."""
        return key_id(self.name, self.public_key)

    @property
    def vkey(self) -> str:
        """The verifier key string: name+keyid+base64(0x01 || public key)."""
        encoded = base64.b64encode(bytes([ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id:08x}+{encoded}"

    def verifies(self, text: bytes, signature: bytes) -> bool:
        """True when signature is this key's Ed25519 signature of text."""
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, text)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True)
class NoteSigner:
    """An Ed25519 private key under its name: what signs notes (the log's side only)."""

    name: str
    private_key: Ed25519PrivateKey = field(repr=False)

    def __post_init__(self) -> None:
        if not is_key_name(self.name):
            raise MalformedKey(f"{self.name!r} is not a key name (empty, a space or a '+')")

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> NoteSigner:
        """The signer of a 32-byte Ed25519 seed (the RFC 8032 private key)."""
        if len(seed) != _KEY_SIZE:
            raise MalformedKey(f"an Ed25519 seed is 32 bytes, not {len(seed)}")
        return cls(name, Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def from_skey(cls, skey: str) -> NoteSigner:
        """The signer of a key string PRIVATE+KEY+name+keyid+base64(0x01 || seed); its key id must match."""
        private, key, name, hex_id, encoded = _fields(skey, 5, "PRIVATE+KEY+name+keyid+key")
        if (private, key) != ("PRIVATE", "KEY"):
            raise MalformedKey("a signer key starts with PRIVATE+KEY+")
        signer = cls.from_seed(name, _material(encoded))
        _check_id(hex_id, signer.key_id)
        return signer

    @property
    def public_key(self) -> bytes:
        """The 32-byte Ed25519 public key."""
        return self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def key_id(self) -> int:
        """The key id its signature lines carry."""
        return key_id(self.name, self.public_key)

    def verifier(self) -> NoteVerifier:
        """The verifier to hand to auditors (NoteVerifier.vkey is its string)."""
        return NoteVerifier(self.name, self.public_key)

    def sign(self, text: bytes) -> bytes:
        """The Ed25519 signature of text (64 bytes, without the key id)."""
        return self.private_key.sign(text)


def _fields(key_string: str, count: int, shape: str) -> list[str]:
    fields = key_string.split("+")
    # Standard base64 may hold '+' itself: the key is everything after the first count - 1 fields.
    if len(fields) < count:
        raise MalformedKey(f"a key string is {shape}")
    return [*fields[: count - 1], "+".join(fields[count - 1 :])]


def _material(encoded: str) -> bytes:
    try:
        material = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise MalformedKey("the key is not standard base64") from exc
    if not material:
        raise MalformedKey("the key is empty")
    if material[0] != ED25519:
        raise MalformedKey(f"signature type 0x{material[0]:02x} is not Ed25519 (0x01)")
    if len(material) != 1 + _KEY_SIZE:
        raise MalformedKey(f"an Ed25519 key is 32 bytes, not {len(material) - 1}")
    return material[1:]


def _check_id(hex_id: str, computed: int) -> None:
    if not _KEY_ID_HEX.fullmatch(hex_id):
        raise MalformedKey(f"the key id {hex_id!r} is not 8 hex digits")
    if int(hex_id, 16) != computed:
        raise MalformedKey(f"the key id {hex_id} does not match the key (its id is {computed:08x})")

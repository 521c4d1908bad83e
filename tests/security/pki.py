"""A throwaway certificate authority for TLS tests (trustme): PEM files for servers and clients."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class Pki:
    """A directory holding a CA and the certificates and keys it signed (plus a foreign CA's)."""

    directory: Path

    def cert(self, name: str) -> Path:
        """The PEM certificate called name."""
        return self.directory / f"{name}.pem"

    def pem(self, name: str) -> Path:
        """The PEM certificate called name (the same file as cert)."""
        return self.cert(name)

    def key(self, name: str) -> Path:
        """The PEM private key of the certificate called name."""
        return self.directory / f"{name}.key"


def write_ca(directory: Path, name: str) -> trustme.CA:
    """Make a CA and write its certificate to directory/<name>.pem."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / f"{name}.pem"))
    return ca


def write_leaf(directory: Path, ca: trustme.CA, name: str, *identities: str, common_name: str | None = None) -> None:
    """Issue a certificate for identities (subject alternative names) and common_name, signed by ca;
    write it to directory/<name>.pem and its key to directory/<name>.key."""
    leaf = ca.issue_cert(*identities, common_name=common_name or name)
    leaf.cert_chain_pems[0].write_to_path(str(directory / f"{name}.pem"))
    leaf.private_key_pem.write_to_path(str(directory / f"{name}.key"))


def make_pki(directory: Path, clients: tuple[str, ...]) -> Pki:
    """A CA, a localhost server certificate, a client certificate per name, and a foreign "stranger"."""
    ca = write_ca(directory, "ca")
    other = write_ca(directory, "other-ca")
    write_leaf(directory, ca, "server", "localhost", "127.0.0.1")
    for name in clients:
        write_leaf(directory, ca, name)
    write_leaf(directory, other, "stranger")
    return Pki(directory)

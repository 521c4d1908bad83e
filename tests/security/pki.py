"""A throwaway certificate authority made with the openssl command line, for TLS tests."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """A directory holding a CA and the certificates and keys it signed (plus a foreign CA's)."""

    directory: Path

    def cert(self, name: str) -> Path:
        """The PEM certificate called name."""
        return self.directory / f"{name}.pem"

    def key(self, name: str) -> Path:
        """The PEM private key of the certificate called name."""
        return self.directory / f"{name}.key"


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=30)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        directory,
        *("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}"),
        *("-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )


def _leaf(directory: Path, ca: str, name: str, extensions: str, serial: int) -> None:
    (directory / f"{name}.ext").write_text(extensions + "\nbasicConstraints=CA:FALSE\n")
    _openssl(
        directory,
        *("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}"),
    )
    _openssl(
        directory,
        *("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key"),
        *("-set_serial", str(serial), "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext"),
    )


def make_pki(directory: Path, clients: tuple[str, ...]) -> Pki:
    """A CA, a localhost server certificate, a client certificate per name, and a foreign "stranger"."""
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    _leaf(directory, "ca", "server", "subjectAltName=DNS:localhost,IP:127.0.0.1", 1)
    for serial, name in enumerate(clients, start=2):
        _leaf(directory, "ca", name, "extendedKeyUsage=clientAuth", serial)
    _leaf(directory, "other-ca", "stranger", "extendedKeyUsage=clientAuth", 99)
    return Pki(directory)

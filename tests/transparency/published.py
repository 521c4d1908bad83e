"""The published vectors under vectors/, each file naming its source (repository, commit, path)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).parent / "vectors"


def vectors(name: str) -> Any:
    """The parsed vector file vectors/<name>.json."""
    return json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))


def unbase64(value: str | None) -> bytes:
    """A base64 field of a transparency-dev probe (Go writes a nil slice as null: no bytes)."""
    return base64.b64decode(value) if value is not None else b""


def proof_of(probe: dict[str, Any]) -> list[bytes]:
    """A probe's proof hashes (null: no proof)."""
    return [unbase64(node) for node in probe["proof"] or []]

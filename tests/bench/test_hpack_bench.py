"""The HPACK amplification bench: every gRPC argument it and the servers pass is one gRPC core reads
(core ignores a name it does not know), and its quick mode runs end to end and writes its figures
(no timing or memory is asserted)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.hpack import CANDIDATES
from decisionflow_server.runtime.serving import ReceiveLimits, TransportLimits

REPO = Path(__file__).resolve().parents[2]
_CORE = importlib.util.find_spec("grpc._cython.cygrpc")
assert _CORE is not None and _CORE.origin is not None
CORE_LIBRARY = Path(_CORE.origin)  # grpcio's extension module, gRPC core linked in


def _core_knows(name: str) -> bool:
    """The argument's name is a string constant of the gRPC core this grpcio carries."""
    return name.encode() + b"\x00" in CORE_LIBRARY.read_bytes()


def test_every_grpc_argument_is_one_core_reads() -> None:
    names = {name for name, _ in TransportLimits.defaults().server_options(ReceiveLimits())}
    names |= {name for candidate in CANDIDATES for name, _ in candidate.grpc_options}
    assert "grpc.http2.hpack_table_size.decoder" in names
    assert [name for name in sorted(names) if not _core_knows(name)] == []
    assert not _core_knows("grpc.http2.max_header_table_size")  # a plausible name core does not read


@pytest.mark.slow
def test_quick_hpack_bench_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "hpack.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DECISIONFLOW_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.hpack", "--quick", "--rounds", "1", "--requests", "8", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "HPACK amplification: 1 rounds x 8 requests" in done.stdout
    document = json.loads(out.read_text(encoding="utf-8"))
    runs = {(m["service"], m["attacker"]): m for m in document["measurements"]}
    assert set(runs) == {
        (service, attacker)
        for service in ("orchestrator", "receiver")
        for attacker in ("no token, SETTINGS unread", "no token, SETTINGS acknowledged")
    }
    for measurement in runs.values():
        assert measurement["requests"] == 8
        assert measurement["served"] == 0
        assert measurement["refused_by_grpc"] + measurement["answered_by_service"] == 8
        assert set(measurement["answers_by_status"]) <= {"3"}  # INVALID_ARGUMENT: the metadata limit
        assert measurement["legitimate_padding_served_before"] == measurement["legitimate_padding_served_after"] == 7168
        assert measurement["rss_before_kib"] > 0 and measurement["rss_after_malloc_trim_kib"] > 0
    for service in ("orchestrator", "receiver"):
        assert runs[(service, "no token, SETTINGS acknowledged")]["refused_by_grpc"] == 8

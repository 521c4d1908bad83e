"""gRPC core's own lines in a service's log: JSON or nothing. A client that ends its connections with
an HTTP/2 error code makes grpcio's core write one INFO line per connection (``Got goaway [2]``) to
descriptor 2 of the worker that served it; the log of a service with two workers stays JSON lines
only, and ``--grpc-log-level info`` keeps those lines as records of the logger ``grpc``."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow_demo.launch import RECEIVER_MODULE, receiver_args
from decisionflow_server.foundation.processes import ServiceProcess, spawn
from decisionflow_server.runtime.grpc_core_logs import CoreLine, parse_line
from tests.support.flood import RawPeer
from tests.support.logs import ServiceLog, read_log

HTTP2_INTERNAL_ERROR = 2
CLIENTS = 12  # each its own connection: the kernel spreads them over both workers


def _clients_go_away(receiver: ServiceProcess) -> None:
    """Open CLIENTS connections and end each with GOAWAY (INTERNAL_ERROR), as a client that gives up does."""
    for _ in range(CLIENTS):
        peer = RawPeer(receiver.port)
        peer.conn.close_connection(error_code=HTTP2_INTERNAL_ERROR)
        peer.flush()
        peer.sock.close()
    # The receiver still serves once they are gone.
    with grpc.insecure_channel(receiver.target) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def _receiver_log(tmp_path: Path, *extra: str) -> ServiceLog:
    receiver = spawn(
        RECEIVER_MODULE,
        receiver_args(f"sqlite:///{tmp_path / 'receiver.db'}", extra=["--workers", "2", *extra]),
        tmp_path,
        "receiver",
    )
    try:
        _clients_go_away(receiver)
        time.sleep(0.5)  # the core logs a GOAWAY on its own threads: let them write before the stop
    finally:
        assert receiver.stop() == 0
    return read_log(receiver.log())


@pytest.mark.slow
def test_a_service_log_stays_json_when_clients_go_away(tmp_path: Path) -> None:
    log = _receiver_log(tmp_path)

    log.assert_json_only()
    # By default the core's INFO lines are dropped; both workers served and stopped.
    assert [r for r in log.records if r["logger"] == "grpc"] == []
    assert {r["worker"] for r in log.records if r["message"] == "stopped"} == {0, 1}


@pytest.mark.slow
def test_grpc_log_level_info_keeps_the_cores_lines_as_json(tmp_path: Path) -> None:
    log = _receiver_log(tmp_path, "--grpc-log-level", "info")

    log.assert_json_only()
    goaways = [r for r in log.records if r["logger"] == "grpc" and "Got goaway [2]" in r["message"]]
    assert goaways, log.records
    for record in goaways:
        assert record["level"] == "info"
        assert str(record["source"]).startswith("chttp2_transport.cc:")
        assert record["worker"] in (0, 1)  # written by a worker, and logged there with its fields


def test_an_abseil_line_gives_its_level_and_source_and_the_lines_after_it_continue_it() -> None:
    first = parse_line("E1203 10:15:02.123456   4242 ssl_transport_security.cc:1885] Handshake failed", None)
    assert first == CoreLine(logging.ERROR, "ssl_transport_security.cc:1885", "Handshake failed")
    assert parse_line("  more of the same message", first) == CoreLine(
        logging.ERROR, "ssl_transport_security.cc:1885", "  more of the same message"
    )
    stray = "a line from somewhere else"
    assert parse_line(stray, None) == CoreLine(logging.WARNING, None, stray)
    fatal = parse_line("F1203 10:15:02.000001 7 server.cc:12] Check failed: x", None)
    assert (fatal.level, fatal.source) == (logging.CRITICAL, "server.cc:12")

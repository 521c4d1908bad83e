"""How the console reads the relay's position, without a browser: the relay's own metrics (its registry, served
as the relay serves it) become its position; the setting that names the endpoint; and each way a read fails
(nothing listening, no answer in time, an HTTP error, another service's metrics, an endless answer) raises
an error carrying the URL tried and words, never a traceback, which the page shows as text."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from decisionflow_console.config import load, relay_metrics_url
from decisionflow_console.pages import Pages
from decisionflow_console.relay import (
    MAX_METRICS_BYTES,
    NotRelayMetrics,
    RelayNotAnswering,
    position_from_metrics,
    read_position,
)
from decisionflow_relay.metrics import RelayMetrics
from decisionflow_server.foundation.processes import free_port

READ_AT = datetime(2026, 12, 8, 1, 0, tzinfo=UTC)


def relay_metrics() -> RelayMetrics:
    """The relay's own metrics with a position set: 40 events acknowledged (2 duplicates), 3 errors, cursor 38."""
    metrics = RelayMetrics()
    metrics.published.inc(40)
    metrics.duplicates.inc(2)
    metrics.publish_errors.inc(3)
    metrics.cursor.set(38)
    metrics.broker_up.set(0)
    metrics.follow(lambda: 5, lambda: 12.5)
    return metrics


def test_the_relays_own_metrics_become_its_position() -> None:
    text = generate_latest(relay_metrics().registry).decode()
    position = position_from_metrics(text, READ_AT)
    assert (position.cursor, position.lag_events, position.lag_seconds, position.broker_up) == (38, 5, 12.5, False)
    assert (position.published, position.duplicates, position.publish_errors) == (40, 2, 3)
    assert position.read_at == READ_AT
    # Its process's start, which the counters count from (Linux exports it).
    assert position.started_at is not None and position.started_at <= datetime.now(UTC)


def test_metrics_of_another_service_or_not_metrics_at_all_are_said_in_words() -> None:
    other = CollectorRegistry()
    Counter("decisionflow_console_requests", "requests", registry=other).inc()
    with pytest.raises(ValueError, match=r"no decisionflow_relay_cursor_index, .*not decisionflow-relay's metrics"):
        position_from_metrics(generate_latest(other).decode(), READ_AT)
    with pytest.raises(ValueError, match="not in the Prometheus text format"):
        position_from_metrics("<html><body>Welcome to nginx!</body></html>\n", READ_AT)


def test_the_setting_names_the_metrics_endpoint_and_never_a_password() -> None:
    assert relay_metrics_url("http://relay:9470") == "http://relay:9470/metrics"
    assert relay_metrics_url(" http://relay:9470/ ") == "http://relay:9470/metrics"
    assert relay_metrics_url("https://relay.internal/relay/metrics") == "https://relay.internal/relay/metrics"
    for refused, words in [
        ("relay:9470", "expected the relay's metrics URL"),
        ("nats://relay:4222", "expected the relay's metrics URL"),
        ("http://ops:secret@relay:9470/metrics", "must not carry a user name or password"),
    ]:
        with pytest.raises(ValueError, match=words):
            relay_metrics_url(refused)


def test_the_setting_is_read_from_its_flag_or_variable_and_a_bad_one_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "session.key"
    key.write_text("k" * 32)
    base = ["--oidc-issuer", "https://id.example.com", "--oidc-client-id", "console", "--session-key-file", str(key)]
    assert load(base, {}).relay_metrics_url is None
    variable = {"DECISIONFLOW_CONSOLE_RELAY_METRICS_URL": "http://relay:9470"}
    assert load(base, variable).relay_metrics_url == "http://relay:9470/metrics"
    flag = [*base, "--relay-metrics-url", "http://127.0.0.1:9471/metrics"]
    assert load(flag, variable).relay_metrics_url == "http://127.0.0.1:9471/metrics"
    with pytest.raises(SystemExit) as exit_info:
        load([*base, "--relay-metrics-url", "http://ops:secret@relay:9470"], {})
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--relay-metrics-url" in error and "user name or password" in error and "secret" not in error


class _Answer(BaseHTTPRequestHandler):
    """Answers GET with the server's status and body (the body repeated `repeat` times)."""

    def do_GET(self) -> None:
        status, body, repeat = self.server.answer  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        try:
            for _ in range(repeat):
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the console stopped reading an answer too large, as it should

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[ThreadingHTTPServer]:
    """A real HTTP server on a free loopback port; set .answer = (status, body, repeat)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.answer = (200, b"", 1)  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/metrics"


def test_a_read_over_http_returns_the_position(http_server: ThreadingHTTPServer) -> None:
    http_server.answer = (200, generate_latest(relay_metrics().registry), 1)  # type: ignore[attr-defined]
    position = asyncio.run(read_position(_url(http_server)))
    assert (position.cursor, position.published, position.broker_up) == (38, 40, False)


def test_an_http_error_another_services_metrics_and_an_endless_answer_are_not_the_relays(
    http_server: ThreadingHTTPServer,
) -> None:
    url = _url(http_server)
    for answer, words in [
        ((404, b"not found\n", 1), "it answered HTTP 404, not 200 with the relay's metrics"),
        ((200, b"process_cpu_seconds_total 1.0\n", 1), "the answer has no decisionflow_relay_cursor_index"),
        ((200, b"# " + b"x" * 1023 + b"\n", MAX_METRICS_BYTES // 1024 + 8), "it answered more than 1024 KiB"),
    ]:
        http_server.answer = answer  # type: ignore[attr-defined]
        with pytest.raises(NotRelayMetrics) as raised:
            asyncio.run(read_position(url))
        assert raised.value.url == url
        assert raised.value.status == 502
        assert words in raised.value.words


def test_nothing_listening_and_no_answer_in_time_are_said_with_the_url_tried() -> None:
    closed = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(RelayNotAnswering) as raised:
        asyncio.run(read_position(closed))
    assert raised.value.url == closed and raised.value.status == 503
    assert raised.value.words == "the console could not connect (Connection refused)"

    # A peer that accepts the connection and never answers: the read gives up after its timeout.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
        with pytest.raises(RelayNotAnswering) as raised:
            asyncio.run(read_position(url, timeout_seconds=0.5))
    assert raised.value.url == url
    assert raised.value.words == "it did not answer within 0.5 s"


def test_what_a_wrong_endpoint_answers_is_shown_as_text_with_hidden_characters_marked(
    http_server: ThreadingHTTPServer,
) -> None:
    # The words of a refused answer quote it: on the page it is escaped and what cannot be seen is marked.
    http_server.answer = (200, "<script>alert(1)</script>\u202egnp.exe\n".encode(), 1)  # type: ignore[attr-defined]
    url = _url(http_server)
    with pytest.raises(NotRelayMetrics) as raised:
        asyncio.run(read_position(url))
    page = Pages().html("relay.html", person=None, csrf_token="", url=url, problem=raised.value, tried_at=READ_AT)
    problem = page.split('id="relay-problem">', 1)[1].split("</p>", 1)[0]
    assert "<script>" not in page and "\u202e" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in problem
    assert 'aria-label="invisible format character U+202E (right-to-left override)"' in problem
    assert f'Tried <code id="relay-url">{url}</code> at <time datetime="2026-12-08T01:00:00Z">' in problem


def _peer(behave: Callable[[socket.socket], None]) -> tuple[str, threading.Thread, socket.socket]:
    """A loopback listener whose first connection is handed to behave on a thread of its own; its URL."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(4096)
            with contextlib.suppress(OSError):
                behave(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/metrics", thread, listener


def _trickle(connection: socket.socket) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(50):  # a byte each 0.1 s: every step is within the timeout, the whole read is not
        connection.sendall(b"1\r\n#\r\n")
        time.sleep(0.1)


def _not_http(connection: socket.socket) -> None:
    connection.sendall(b'INFO {"server_id":"NATS","version":"2.9.20"}\r\n')


def test_an_answer_that_trickles_in_and_a_port_that_is_not_http_are_said_in_words() -> None:
    url, thread, listener = _peer(_trickle)
    with listener:
        with pytest.raises(RelayNotAnswering) as raised:
            asyncio.run(read_position(url, timeout_seconds=0.5))
        assert raised.value.words == "it did not answer within 0.5 s"
        thread.join(10)

    # A NATS client port given by mistake: it greets in its own protocol.
    url, thread, listener = _peer(_not_http)
    with listener:
        with pytest.raises(RelayNotAnswering) as raised:
            asyncio.run(read_position(url))
        assert raised.value.words.startswith("it did not answer in HTTP (")
        thread.join(10)

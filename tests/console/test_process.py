"""decisionflow-console as a process: it starts from its settings, answers /healthz with the security
headers, writes one JSON access line per request (no query string), serves its request metrics, and
stops on SIGTERM; a bad setting exits 2 naming it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx2

from decisionflow_console.web import CONTENT_SECURITY_POLICY
from decisionflow_server.foundation.processes import free_port, spawn

MODULE = "decisionflow_console.main"


def test_the_console_process_serves_health_logs_and_metrics(tmp_path: Path) -> None:
    key = tmp_path / "session.key"
    key.write_text("k" * 40)
    metrics_port = free_port()
    args = [
        "--address", "127.0.0.1:0",
        "--oidc-issuer", "https://id.example.com",
        "--oidc-client-id", "console",
        "--session-key-file", str(key),
        "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    console = spawn(MODULE, args, tmp_path, "console")
    try:
        base = f"http://127.0.0.1:{console.port}"
        health = httpx2.get(base + "/healthz")
        assert health.status_code == 200 and health.text == "SERVING\n"
        assert health.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        welcome = httpx2.get(base + "/?secret=do-not-log")
        assert "Sign in" in welcome.text
        scrape = httpx2.get(f"http://127.0.0.1:{metrics_port}/metrics").text
        assert 'decisionflow_console_requests_total{code="200",method="GET",route="/healthz"} 1.0' in scrape
        assert "decisionflow_console_request_seconds_bucket" in scrape
    finally:
        assert console.stop() == 0
    lines = [json.loads(line) for line in console.stderr().splitlines() if line.startswith("{")]
    access = [line for line in lines if line.get("event") == "http_request"]
    assert [(a["message"], a["code"], a["detail"]) for a in access] == [
        ("GET /healthz 200", 200, "/healthz"),
        ("GET / 200", 200, "/"),
    ]
    assert "do-not-log" not in console.stderr()
    listening = json.loads(console.stdout_path.read_text().splitlines()[0])
    assert listening["event"] == "listening" and listening["port"] == console.port
    assert listening["detail"] == f"http://127.0.0.1:{console.port}"


def test_a_bad_setting_exits_2_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--oidc-issuer", "https://id.example.com", "--oidc-client-id", "console"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "decisionflow-console: error: --session-key-file (env DECISIONFLOW_CONSOLE_SESSION_KEY_FILE) is required"
    )

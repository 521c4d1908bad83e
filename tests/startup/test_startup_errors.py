"""A server that cannot start says why in one JSON log line naming the setting to fix, exits 2 for a
configuration error and 1 for a runtime failure, shows the traceback only at --log-level debug,
and leaves nothing behind. Each case runs the real console script as a child process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from decisionflow_server.foundation.processes import child_environment, free_port
from tests.support.databases import create_postgres_database, drop_postgres_database

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
KEY = "k" * 32


@dataclass(frozen=True)
class Server:
    """A server's console script, the prefix of its settings' variables and the environment it needs."""

    script: str
    prefix: str
    environ: dict[str, str]


SERVERS = {
    "receiver": Server("decisionflow-receiver", "DECISIONFLOW_RECEIVER", {}),
    "orchestrator": Server(
        "decisionflow-orchestrator", "DECISIONFLOW_ORCHESTRATOR", {"DECISIONFLOW_CHECKPOINT_KEYS": KEY}
    ),
}


@dataclass(frozen=True)
class Failure:
    """How a start ended: exit status, the one error line's fields, and everything on stderr."""

    returncode: int
    entry: dict[str, Any]
    stderr: str
    stdout: str


def start(server: Server, directory: Path, *args: str, command: tuple[str, ...] = ()) -> Failure:
    """Run the server's console script (its command, serve when none) with a fresh SQLite file in directory
    unless args name another."""
    database = ["--database-url", str(directory / "service.db")]
    done = subprocess.run(
        [str(BIN / server.script), *command, *database, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=directory,
        env=child_environment(server.environ),
    )
    errors = [json.loads(line) for line in done.stderr.splitlines() if '"level": "error"' in line]
    assert len(errors) == 1, done.stderr
    return Failure(done.returncode, errors[0], done.stderr, done.stdout)


def assert_one_line(failure: Failure) -> None:
    """Below debug the error line is all there is on stderr, and it carries no traceback."""
    assert len(failure.stderr.splitlines()) == 1, failure.stderr
    assert "error" not in failure.entry and "Traceback" not in failure.stderr
    assert "listening" not in failure.stdout


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another socket is listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


@pytest.mark.parametrize("name", SERVERS)
def test_a_database_url_that_cannot_be_parsed_is_a_configuration_error(name: str, tmp_path: Path) -> None:
    server = SERVERS[name]
    failure = start(server, tmp_path, "--address", "127.0.0.1:0", "--database-url", "postgresql://u@127.0.0.1:port/db")
    assert failure.returncode == 2
    assert_one_line(failure)
    assert failure.entry["message"].startswith(
        f"{server.script}: cannot use the database URL (--database-url / {server.prefix}_DATABASE_URL): "
    )
    assert "'port'" in failure.entry["message"] and failure.entry["setting"] == "--database-url"


@pytest.mark.parametrize("name", SERVERS)
def test_a_database_that_refuses_connections_is_a_runtime_failure(name: str, tmp_path: Path) -> None:
    server = SERVERS[name]
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/test"
    failure = start(server, tmp_path, "--address", "127.0.0.1:0", "--database-url", down)
    assert failure.returncode == 1
    assert_one_line(failure)
    message = failure.entry["message"]
    assert message.startswith(
        f"{server.script}: cannot open the database (--database-url / {server.prefix}_DATABASE_URL)"
    )
    assert "Connection refused" in message


@pytest.fixture
def ascii_database() -> Iterator[str]:
    """A PostgreSQL database created without a UTF-8 locale (SQL_ASCII), as some old clusters make them."""
    url = create_postgres_database(encoding="SQL_ASCII")
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.mark.postgres
@pytest.mark.parametrize("name", SERVERS)
@pytest.mark.parametrize("command", [(), ("migrate",)], ids=["serve", "migrate"])
def test_a_database_not_encoded_utf8_is_refused_before_anything_is_written(
    name: str, command: tuple[str, ...], tmp_path: Path, ascii_database: str
) -> None:
    server = SERVERS[name]
    serving = () if command else ("--address", "127.0.0.1:0")
    failure = start(server, tmp_path, *serving, "--database-url", ascii_database, command=command)
    assert failure.returncode == 2
    assert_one_line(failure)
    prog = " ".join([server.script, *command])
    assert failure.entry["message"].startswith(
        f"{prog}: cannot use the database (--database-url / {server.prefix}_DATABASE_URL): "
        f"the PostgreSQL database '{ascii_database.rsplit('/', 1)[1]}' is encoded SQL_ASCII, not UTF8: "
    )
    with psycopg.connect(ascii_database) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables == (0,)


@pytest.mark.parametrize("name", SERVERS)
def test_a_port_in_use_is_a_runtime_failure_found_before_the_database_is_touched(
    name: str, tmp_path: Path, held_port: int
) -> None:
    server = SERVERS[name]
    failure = start(server, tmp_path, "--address", f"127.0.0.1:{held_port}")
    assert failure.returncode == 1
    assert_one_line(failure)
    assert failure.entry["message"] == (
        f"{server.script}: cannot listen on 127.0.0.1:{held_port} (--address / {server.prefix}_ADDRESS): "
        "Address already in use"
    )
    assert not (tmp_path / "service.db").exists()


@pytest.mark.parametrize("name", SERVERS)
def test_a_missing_credentials_file_is_a_configuration_error(name: str, tmp_path: Path) -> None:
    server = SERVERS[name]
    missing = tmp_path / "absent" / "credentials.json"
    failure = start(server, tmp_path, "--address", "127.0.0.1:0", "--credentials-file", str(missing))
    assert failure.returncode == 2
    assert_one_line(failure)
    assert failure.entry["message"] == (
        f"{server.script}: cannot use the credentials file (--credentials-file / DECISIONFLOW_CREDENTIALS_FILE): "
        f"{missing}: cannot read credentials file: No such file or directory"
    )
    assert not (tmp_path / "service.db").exists()


def test_a_review_rules_file_with_a_problem_is_a_configuration_error_naming_file_and_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('version = 1\n\n[[actions.refund.stages]]\nname = "leads"\naprovals = 2\n', encoding="utf-8")
    failure = start(SERVERS["orchestrator"], tmp_path, "--address", "127.0.0.1:0", "--review-rules-file", str(rules))
    assert failure.returncode == 2
    assert_one_line(failure)
    assert failure.entry["message"] == (
        "decisionflow-orchestrator: cannot use the review rules file (--review-rules-file / "
        f"DECISIONFLOW_REVIEW_RULES_FILE): {rules}:5: actions.refund.stages[0].aprovals: unknown key "
        "(did you mean 'approvals'?)"
    )
    assert failure.entry["setting"] == "--review-rules-file"
    assert not (tmp_path / "service.db").exists()


@pytest.mark.parametrize(
    ("files", "setting", "cause"),
    [
        ({"cert": "not a certificate", "key": ""}, "--tls-cert", "not usable PEM"),
        ({"cert": None, "key": ""}, "--tls-cert", "No such file or directory"),
    ],
)
def test_unusable_tls_files_are_configuration_errors_naming_the_file(
    tmp_path: Path, files: dict[str, str | None], setting: str, cause: str
) -> None:
    paths = {}
    for which, content in files.items():
        paths[which] = tmp_path / f"server.{which}"
        if content is not None:
            paths[which].write_text(content)
    args = ["--address", "127.0.0.1:0", "--tls-cert", str(paths["cert"]), "--tls-key", str(paths["key"])]
    failure = start(SERVERS["receiver"], tmp_path, *args)
    assert failure.returncode == 2
    assert_one_line(failure)
    assert f"({setting} / " in failure.entry["message"] and cause in failure.entry["message"]
    assert failure.entry["setting"] == setting


@pytest.mark.parametrize("name", SERVERS)
def test_at_debug_the_error_line_carries_the_traceback(name: str, tmp_path: Path) -> None:
    server = SERVERS[name]
    missing = tmp_path / "credentials.json"
    failure = start(
        server, tmp_path, "--address", "127.0.0.1:0", "--credentials-file", str(missing), "--log-level", "debug"
    )
    assert failure.returncode == 2
    assert "cannot use the credentials file (--credentials-file" in failure.entry["message"]
    assert failure.entry["error"].startswith("Traceback (most recent call last):")
    assert "FileNotFoundError" in failure.entry["error"]


def test_the_reconciler_names_a_metrics_port_in_use_in_one_line(tmp_path: Path, held_port: int) -> None:
    done = subprocess.run(
        [str(BIN / "decisionflow-reconciler"), "--interval", "30", "--metrics-port", str(held_port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=child_environment(),
    )
    assert done.returncode == 2  # the reconciler's "could not run"; 1 means Unknowns are too old
    [line] = done.stderr.splitlines()
    entry = json.loads(line)
    assert entry["message"].startswith(
        f"decisionflow-reconciler: cannot serve metrics on 127.0.0.1:{held_port} "
        "(--metrics-port / DECISIONFLOW_RECONCILER_METRICS_PORT, --metrics-address / "
    )
    assert "error" not in entry


@pytest.mark.parametrize(
    ("url", "status", "what"),
    [
        ("postgresql://u@127.0.0.1:port/db", 2, "cannot use the database URL"),
        ("postgresql://postgres@127.0.0.1:{closed_port}/test", 1, "cannot open the database"),
    ],
)
def test_housekeeping_reports_its_database_the_same_way(tmp_path: Path, url: str, status: int, what: str) -> None:
    url = url.format(closed_port=free_port())
    done = subprocess.run(
        [str(BIN / "decisionflow-orchestrator"), "prune-checkpoints", "--older-than-days", "30", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=child_environment(),
    )
    assert done.returncode == status and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert json.loads(line)["message"].startswith(
        f"decisionflow-orchestrator prune-checkpoints: {what} "
        "(--database-url / DECISIONFLOW_ORCHESTRATOR_DATABASE_URL): "
    )

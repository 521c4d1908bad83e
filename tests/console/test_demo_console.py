"""``decisionflow demo --console`` run exactly as docs/console.md#try-it documents it, from the
repository root with the PATH a user has after ``make setup`` (.venv/bin not on it): the console
it announces signs the reviewer in at the trial provider in a real browser, the seeded T-1042 is
approved to COMMITTED, and Ctrl-C (SIGINT to the foreground process group) stops every process it
started, exit 0."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from playwright.sync_api import Page, expect

from tests.console.pages import start_case_at

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORT = 8080
START_SECONDS = 40
READY_LINE = "Ctrl-C stops everything."
DEMO_CONSOLE = (str(ROOT / ".venv" / "bin" / "decisionflow"), "demo", "--console")


def documented_command() -> str:
    """The command line in the first sh block of docs/console.md's "Try it" section."""
    section = (ROOT / "docs" / "console.md").read_text(encoding="utf-8").split("## Try it\n", 1)[1].split("\n## ")[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    [line] = [line for line in block.splitlines() if "demo --console" in line]
    return line.strip()


def _user_environment() -> dict[str, str]:
    # A terminal after `make setup`: the virtual environment is not activated and no setting is exported.
    venv_bin = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p.rstrip("/") != venv_bin)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECISIONFLOW_", "VIRTUAL_ENV"))}
    return {**env, "PATH": path}


def _port_taken(port: int) -> bool:
    try:
        with socket.create_server(("127.0.0.1", port)):
            return False
    except OSError:
        return True


class Running:
    """The command in its own process group, as a terminal runs a foreground job; stdout read by a thread."""

    def __init__(self, command: str) -> None:
        # bash, as in a terminal: it runs a single command in place, so Ctrl-C reaches the command itself.
        self.process = subprocess.Popen(
            command,
            shell=True,
            executable="/bin/bash",
            cwd=ROOT,
            env=_user_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: Iterator[str]) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float) -> None:
        """Collect stdout lines until one equals text; fail with what was seen if it does not come."""
        deadline = time.monotonic() + timeout
        while not self.seen or self.seen[-1] != text:
            try:
                self.seen.append(self.lines.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                stderr = self.stop_now()
                pytest.fail(f"no {text!r} within {timeout:.0f} s; stdout {self.seen}; stderr {stderr[-2000:]}")

    def ctrl_c(self, timeout: float = 30) -> int:
        """Send SIGINT to the foreground process group, as Ctrl-C in a terminal does; return the exit status."""
        os.killpg(self.process.pid, signal.SIGINT)
        status = self.process.wait(timeout)
        self.last_lines()
        return status

    def last_lines(self) -> None:
        """Take the lines written after the ready line, once the command has exited."""
        self._reader.join(10)
        while not self.lines.empty():
            self.seen.append(self.lines.get())

    def stop_now(self) -> str:
        """Stop the command (SIGTERM, then SIGKILL) and return its stderr."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        assert self.process.stderr is not None and self.process.stdout is not None
        if self.process.stderr.closed:
            return ""
        stderr = self.process.stderr.read()
        self._reader.join(10)  # it ends at the end of stdout, once every process holding it has exited
        self.process.stderr.close()
        self.process.stdout.close()
        return stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _effects(state_dir: Path, case_id: str) -> int:
    engine = sa.create_engine(f"sqlite:///{state_dir / 'receiver.db'}")
    try:
        with engine.connect() as connection:
            query = sa.text("SELECT count(*) FROM effects WHERE case_id = :case")
            return int(connection.execute(query, {"case": case_id}).scalar_one())
    finally:
        engine.dispose()


def _audit_kinds(state_dir: Path, case_id: str) -> list[str]:
    """The kinds of the audit log's entries of case_id, in the order they were written."""
    engine = sa.create_engine(f"sqlite:///{state_dir / 'orchestrator.db'}")
    try:
        with engine.connect() as connection:
            query = sa.text("SELECT kind FROM audit_entries WHERE case_id = :case ORDER BY entry_id")
            return [str(kind) for kind in connection.execute(query, {"case": case_id}).scalars()]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_the_documented_command_serves_the_console_until_ctrl_c(page: Page) -> None:
    command = documented_command()
    assert command == ".venv/bin/decisionflow demo --console", command
    if _port_taken(DEFAULT_PORT):
        pytest.skip(f"port {DEFAULT_PORT} is taken on this machine; the documented command listens there")
    running = Running(command)
    state_dir: Path | None = None
    try:
        running.wait_for(READY_LINE, START_SECONDS)
        transcript = "\n".join(running.seen)
        state = re.search(r"^decisionflow demo --console in (\S+) ", transcript, re.MULTILINE)
        url = re.search(r"^Open (http://\S+) and sign in", transcript, re.MULTILINE)
        assert state and url, transcript
        state_dir = Path(state[1])
        assert url[1] == f"http://127.0.0.1:{DEFAULT_PORT}"
        pids = [int(pid) for pid in re.findall(r"\bpid (\d+)\b", transcript)]
        assert len(pids) == 4 and all(_alive(pid) for pid in pids), transcript  # and the reconciler's loop
        assert "FOR TRYING ONLY" in transcript
        for secret in ("console-client-secret", "console-session-key"):
            assert (state_dir / secret).stat().st_mode & 0o777 == 0o600

        # The reviewer signs in on the trial provider's page and approves the seeded case.
        page.goto(url[1] + "/login")
        page.get_by_placeholder("sub").fill("rita")
        page.get_by_role("button", name="Authorize").click()
        page.wait_for_url(url[1] + "/**")
        expect(page.locator("#person")).to_have_text("Rita")
        rows = page.locator("#inbox tbody tr")
        expect(rows).to_have_count(2)
        rows.filter(has_text="T-1042").get_by_role("link").first.click()
        expect(page.locator("#state")).to_have_attribute("data-state", "PENDING_REVIEW")
        page.click("#approve")
        expect(page.locator("#outcome")).to_have_attribute("data-outcome", "COMMITTED")
        assert _effects(state_dir, "T-1042") == 1

        status = running.ctrl_c()
        assert status == 0, (running.seen, running.stop_now())
        assert running.seen[-1] == (
            "Stopped receiver, orchestrator, reconciler, console and the trial identity provider."
        )
        left = [pid for pid in pids if _alive(pid)]
        assert not left, f"still running after Ctrl-C: {left}"
        assert not _port_taken(DEFAULT_PORT), "the console's port is still bound"
    finally:
        running.stop_now()
        if state_dir is not None and state_dir.parent == Path(tempfile.gettempdir()):
            shutil.rmtree(state_dir, ignore_errors=True)


def test_a_taken_console_address_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        state_dir = tmp_path / "state"
        done = subprocess.run(
            [*DEMO_CONSOLE, "--console-address", address, "--state-dir", str(state_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=_user_environment(),
        )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        f"decisionflow demo: cannot listen on {address} (--console-address): Address already in use; "
        "choose another with --console-address 127.0.0.1:PORT (port 0 picks a free one)"
    )
    assert done.stdout == "" and not state_dir.exists()


def test_without_the_extras_the_error_names_the_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from decisionflow_demo import DemoError
    from decisionflow_demo import console as demo_console

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DemoError) as refused:
        demo_console.require_extras()
    assert str(refused.value) == (
        "--console needs the console and trial extras of decisionflow: pip install '.[console,trial]' in the "
        "repository (make setup installs them)"
    )


def _started_on_a_free_port(tmp_path: Path, *flags: str) -> tuple[Running, list[int]]:
    state = str(tmp_path / "state")
    command = " ".join([*DEMO_CONSOLE, "--console-address", "127.0.0.1:0", "--state-dir", state, *flags])
    running = Running(command)
    running.wait_for(READY_LINE, START_SECONDS)
    pids = [int(pid) for pid in re.findall(r"\bpid (\d+)\b", "\n".join(running.seen))]
    assert len(pids) == 4 and all(_alive(pid) for pid in pids), running.seen
    return running, pids


@pytest.mark.slow
def test_sigterm_stops_everything_with_status_0(tmp_path: Path) -> None:
    running, pids = _started_on_a_free_port(tmp_path)
    try:
        os.kill(running.process.pid, signal.SIGTERM)
        assert running.process.wait(30) == 0
        assert not [pid for pid in pids if _alive(pid)]
    finally:
        running.stop_now()


@pytest.mark.slow
def test_a_part_that_stops_on_its_own_stops_the_rest_with_status_1(tmp_path: Path) -> None:
    running, pids = _started_on_a_free_port(tmp_path)
    orchestrator = pids[1]
    try:
        os.kill(orchestrator, signal.SIGKILL)
        assert running.process.wait(30) == 1
        assert not [pid for pid in pids if _alive(pid)]
        running.last_lines()
        assert any(line.startswith("orchestrator stopped on its own (exit -9)") for line in running.seen), running.seen
    finally:
        running.stop_now()


def _sign_in(page: Page, url: str, name: str) -> None:
    page.goto(url + "/login")
    page.get_by_placeholder("sub").fill(name)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(url + "/**")


@pytest.mark.slow
def test_lost_replies_are_settled_by_the_demos_reconciler_and_four_eyes_refuses_sam(tmp_path: Path, page: Page) -> None:
    running, _ = _started_on_a_free_port(tmp_path, "--lose-replies")
    try:
        url = re.search(r"^Open (http://\S+) and sign in", "\n".join(running.seen), re.MULTILINE)
        assert url is not None and "--lose-replies: " in "\n".join(running.seen)
        # The reply is lost: Unknown; the reconciler's loop looks the effect up and commits it. On a loaded
        # machine the Approve's own retries of Apply can outlast the reconciler's grace (5 s): the lookup
        # commits the operation first, and the Approve answers what is stored, COMMITTED.
        _sign_in(page, url[1], "rita")
        page.locator("#inbox tbody tr").filter(has_text="T-1042").get_by_role("link").first.click()
        proposal = page.url
        page.click("#approve")
        expect(page.locator("#outcome")).to_have_attribute("data-outcome", re.compile(r"^(UNKNOWN|COMMITTED)$"))
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            page.goto(proposal)
            if page.locator("#state").get_attribute("data-state") == "COMMITTED":
                break
            time.sleep(1)
        expect(page.locator("#state")).to_have_attribute("data-state", "COMMITTED")
        assert _effects(tmp_path / "state", "T-1042") == 1
        # Every reply was lost: only a lookup can have committed it, and the log says so.
        assert _audit_kinds(tmp_path / "state", "T-1042") == ["proposal", "decision", "settlement"]
        # sam is author and reviewer: the four-eyes rule refuses sam's own proposal.
        page.context.clear_cookies()
        _sign_in(page, url[1], "sam")
        start_case_at(page, url[1], "T-sam")
        page.click("#approve")
        expect(page.locator("h1")).to_have_text("You cannot decide your own proposal")
        assert _effects(tmp_path / "state", "T-sam") == 0
    finally:
        running.stop_now()

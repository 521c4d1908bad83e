"""A PostgreSQL cluster under Patroni, owned by one test: one etcd and three nodes on loopback ports.

etcd (Debian's ``etcd-server``) holds the leader key; each node's Patroni runs its PostgreSQL (as the
``postgres`` OS user; PostgreSQL refuses root) and promotes a standby when the leader's key expires.
Patroni is the version pinned in tools/patroni/requirements.txt, installed on first use into a
virtual environment under the system's temporary folder: Debian bookworm's own (3.0.2) lost
acknowledged commits in this campaign, a stalled leader taking the key back after a partition
(fixed upstream in 3.0.3).

Synchronous mode strict (the default here) keeps one synchronous standby: a commit returns once
that standby has its WAL, and no standby that might lack a commit is promoted. Asynchronous mode is
the same cluster without it.

Faults, as the campaign applies them: lose a node (SIGKILL its Patroni and postmaster together),
partition the leader (iptables drops every packet its processes send, matched by the cgroup they
run in, and every packet to its ports: it runs on, cut from etcd, its standbys and its clients), a
switchover as an operator does it
(``patronictl switchover``), and lose a standby while the leader runs. A lost node is started again
and rejoins as a standby (``pg_rewind``); when its rewind fails, Patroni removes its data directory
and clones it again from the leader (``remove_data_directory_on_rewind_failure``). Two more levers:
``write_burst`` leaves the standbys megabytes behind, and ``fail_next_rewind`` makes a node's next
``pg_rewind`` fail, as one cut short by a leader change does.

When the test fails, ``log_tails`` is what it prints: the end of each node's log (Patroni's and
its PostgreSQL's lines, which go to the same file).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from decisionflow_server.foundation.processes import free_port

OS_USER = "postgres"
ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "tools" / "patroni" / "requirements.txt"
# Under the system's temporary folder, not the clone: the postgres OS user must reach it, and a
# clone under root's home is out of its reach. Named by the requirements' hash.
VENV_PARENT = Path(tempfile.gettempdir())
# One installer on this machine at a time (the virtual environment is shared by every checkout here).
INSTALL_LOCK = VENV_PARENT / "decisionflow-patroni.lock"
# Debian's interpreter: one under root's home (pyenv) is out of the postgres user's reach.
PATRONI_PYTHON = "/usr/bin/python3"
REQUIRE_ENV = "DECISIONFLOW_REQUIRE_PATRONI"
KEEP_ENV = "DECISIONFLOW_KEEP_PATRONI"  # set: the cluster's folder (its logs) is kept after the test
TTL_SECONDS = 20
LOOP_WAIT_SECONDS = 2
RETRY_TIMEOUT_SECONDS = 5
# How far behind the leader's last published WAL position a standby may be and still be promoted. In strict
# synchronous mode only the synchronous standby may be promoted, and it has every commit the leader acknowledged:
# what it lacks is WAL no acknowledged commit needs (a transaction still open, commits waiting for it). Patroni
# 4.1.5 applies the limit there too (ha.py, _is_healthiest_node), so a limit only ever leaves the cluster without
# a leader (1 MB did, for as long as the dead node stayed down): it is set past any lag. Asynchronous: Patroni's
# default, which bounds what a promotion may lose.
MAXIMUM_LAG_ON_FAILOVER_BYTES = {True: 1 << 40, False: 1 << 20}
# Lines of each node's log printed when the test fails, without the lines that say little: Patroni's heartbeat
# ("no action") and the fields of the pg_controldata it logs before each start but the state and the timeline.
LOG_TAIL_LINES = 80
_LOG_NOISE = re.compile(
    r".* INFO: no action\. "
    r"|  (?!Database cluster state|Latest checkpoint's TimeLineID)[A-Za-z][\w' ()/-]*: "
)
READY_TIMEOUT_SECONDS = 120.0
# A commit on the leader, its synchronous standby's acknowledgement included, counts as prompt below this (the
# campaigns give each Apply 1 s).
PROMPT_COMMIT_SECONDS = 0.25
# What the services' URLs add to the hosts (docs/deployment.md, "High availability"): connect only to
# the writable node; give up on a node that does not answer a connection within 2 s; and drop a
# connection whose sent data goes unacknowledged for 5 s (a partitioned node never answers, nor
# sends the reset that a restarted one would).
CLIENT_PARAMETERS = "target_session_attrs=read-write&connect_timeout=2&tcp_user_timeout=5000"
# A node's processes are put in a cgroup of their own (cgroup v2), so that iptables can drop every
# packet they send (``-m cgroup --path``) when the node is partitioned.
CGROUP2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def available() -> str | None:
    """None when etcd, PostgreSQL's binaries and a Python for Patroni are here; else why not."""
    if shutil.which("etcd") is None:
        return "etcd is not installed (Debian package etcd-server)"
    if _bindir() is None:
        return "PostgreSQL's server binaries are not installed"
    if not Path(PATRONI_PYTHON).is_file():
        return f"{PATRONI_PYTHON} is not here to run Patroni as the postgres user"
    if os.geteuid() != 0:
        return "the cluster's nodes run as the postgres OS user and its partitions need iptables: run as root"
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"a Patroni cluster is required: {reason}")
    pytest.skip(reason)


def install_patroni(lock: Path = INSTALL_LOCK) -> str:
    """The path of the pinned Patroni, installed into a virtual environment on first use (one installer at a
    time, under lock); skips, or fails under DECISIONFLOW_REQUIRE_PATRONI=1, when it cannot be."""
    reason = available()
    if reason is not None:
        _unavailable(reason)
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    venv = VENV_PARENT / f"decisionflow-patroni-venv-{wanted[:16]}"
    stamp = venv / ".installed"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not stamp.is_file() or stamp.read_text() != wanted:
            shutil.rmtree(venv, ignore_errors=True)
            steps = (
                [PATRONI_PYTHON, "-m", "venv", str(venv)],
                [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)],
            )
            for step in steps:
                done = subprocess.run(step, capture_output=True, text=True, timeout=900, check=False)
                if done.returncode != 0:
                    shutil.rmtree(venv, ignore_errors=True)
                    _unavailable(f"Patroni could not be installed ({' '.join(step[:3])}): {done.stderr[-500:]}")
            venv.chmod(0o755)
            stamp.write_text(wanted)
    return str(venv / "bin" / "patroni")


def _cgroup2_root() -> Path | None:
    return next((root for root in CGROUP2_ROOTS if (root / "cgroup.procs").exists()), None)


def _iptables(*rule: str) -> None:
    done = subprocess.run(["iptables", "-w", *rule], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"iptables {' '.join(rule)}: {done.stderr.strip()}"


def _bindir() -> Path | None:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), reverse=True)
    return versions[0].parent if versions else None


def _as_server_user() -> list[str]:
    # setpriv execs the program itself (runuser forks it): the pid started is Patroni's, to kill.
    return ["setpriv", f"--reuid={OS_USER}", f"--regid={OS_USER}", "--init-groups"] if os.geteuid() == 0 else []


@dataclass
class Node:
    """One Patroni node: its name, PostgreSQL port, REST API port, folder and running Patroni."""

    name: str
    port: int
    api_port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.folder / "patroni.yml"

    @property
    def datadir(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        """Patroni's log, and its PostgreSQL's (which writes to the standard error Patroni is given)."""
        return self.folder / "patroni.log"

    @property
    def rewind_wrapper(self) -> Path:
        return self.folder / "pg_rewind"

    @property
    def rewind_failure(self) -> Path:
        """While this file is there, the node's next pg_rewind fails (and removes it)."""
        return self.folder / "fail-next-rewind"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the node's log, without Patroni's "no action" heartbeat lines."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            return f"(no log: {error})"
        kept = [line for line in text.splitlines() if not _LOG_NOISE.match(line)]
        return "\n".join(kept[-lines:])

    @property
    def cgroup(self) -> str:
        """The node's cgroup, relative to the cgroup v2 root."""
        return f"decisionflow-{self.folder.parent.name}-{self.name}"

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid (from postmaster.pid), or None."""
        with suppress(OSError, ValueError, IndexError):
            return int((self.datadir / "postmaster.pid").read_text().splitlines()[0])
        return None

    def state(self) -> dict[str, Any] | None:
        """Patroni's REST answer for this node (role, state, timeline), or None when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/patroni", timeout=2) as answer:
                return dict(json.load(answer))
        except urllib.error.HTTPError as error:  # 503 for a replica or a stopped node: the body still says
            with suppress(ValueError):
                return dict(json.load(error))
            return None
        except OSError:
            return None


@dataclass
class PatroniCluster:
    """etcd and three Patroni nodes on loopback ports in folder."""

    folder: Path
    synchronous: bool = True
    patroni_bin: str = "patroni"
    scope: str = "decisionflow"
    etcd_port: int = 0
    etcd_peer_port: int = 0
    etcd: subprocess.Popen[bytes] | None = None
    nodes: list[Node] = field(default_factory=list)
    keep: bool = False  # set: the folder (its logs) is kept after the cluster stops

    def url(self, database: str) -> str:
        """A URL naming every node; libpq connects to whichever is writable."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql://postgres@{hosts}/{database}?{CLIENT_PARAMETERS}"

    def node_url(self, node: Node, database: str) -> str:
        """A URL for database on one node only (to read a standby)."""
        return f"postgresql://postgres@127.0.0.1:{node.port}/{database}?connect_timeout=2"

    def start(self) -> None:
        """Start etcd and three nodes; return once there is a leader and (synchronous mode) a synchronous standby."""
        if os.geteuid() == 0:
            shutil.chown(self.folder, OS_USER)
        self._start_etcd()
        for index in range(3):
            folder = self.folder / f"n{index + 1}"
            folder.mkdir(mode=0o700)
            if os.geteuid() == 0:
                shutil.chown(folder, OS_USER)
            node = Node(f"n{index + 1}", free_port(), free_port(), folder)
            node.config.write_text(self._config(node), encoding="utf-8")
            self._write_rewind_wrapper(node)
            self.nodes.append(node)
        self.start_node(self.nodes[0])
        self.wait_for(lambda: self.leader() is not None, "a leader")
        for node in self.nodes[1:]:
            self.start_node(node)
        self.wait_healthy()

    def _start_etcd(self) -> None:
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        with (self.folder / "etcd.log").open("ab") as log:
            self.etcd = self._popen(
                [
                    "etcd",
                    *("--name", "e1", "--data-dir", str(self.folder / "etcd")),
                    *("--listen-client-urls", client, "--advertise-client-urls", client),
                    *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
                    *("--initial-cluster", f"e1={peer}"),
                ],
                log,
            )

    @staticmethod
    def _popen(argv: list[str], log: Any) -> subprocess.Popen[bytes]:
        # The child keeps its own copy of the log's descriptor; the caller closes its own.
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _config(self, node: Node) -> str:
        dcs = {
            "ttl": TTL_SECONDS,
            "loop_wait": LOOP_WAIT_SECONDS,
            "retry_timeout": RETRY_TIMEOUT_SECONDS,
            "synchronous_mode": self.synchronous,
            "synchronous_mode_strict": self.synchronous,
            "maximum_lag_on_failover": MAXIMUM_LAG_ON_FAILOVER_BYTES[self.synchronous],
            "postgresql": {
                # A rejoining node whose timeline diverged is rewound (wal_log_hints or data checksums let
                # pg_rewind run); when the rewind fails (one cut short by a switchover in a campaign run left an
                # empty pg_hba.conf, and the node never started again), or cannot run, its data directory is
                # removed and cloned again from the leader.
                "use_pg_rewind": True,
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True,
                # The clone's pg_basebackup starts with a checkpoint: spread (PostgreSQL's default), it took
                # 102 s under the campaign's load, and the node was still being cloned when the test gave up.
                "basebackup": {"checkpoint": "fast"},
                # A standby whose WAL stream ended (its primary lost) tries again after wal_retrieve_retry_interval:
                # 5 s by default, and strict mode lets the new primary commit nothing until one follows it.
                "parameters": {
                    "max_connections": 200,
                    "wal_log_hints": "on",
                    "wal_keep_size": "256MB",
                    "wal_retrieve_retry_interval": "1s",
                },
            },
        }
        config = {
            "scope": self.scope,
            "name": node.name,
            "restapi": {"listen": f"127.0.0.1:{node.api_port}", "connect_address": f"127.0.0.1:{node.api_port}"},
            "etcd3": {"host": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": dcs,
                "initdb": [{"encoding": "UTF8"}, "data-checksums"],
                "pg_hba": [
                    "host replication repl 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                    "local all all trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}",
                "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.datadir),
                "bin_dir": str(_bindir()),
                "pgpass": str(node.folder / "pgpass"),
                "authentication": {
                    "replication": {"username": "repl", "password": "x"},
                    "superuser": {"username": "postgres", "password": "x"},
                    "rewind": {"username": "postgres", "password": "x"},
                },
                "parameters": {"unix_socket_directories": str(node.folder)},
                "bin_name": {"pg_rewind": str(node.rewind_wrapper)},
            },
        }
        return json.dumps(config, indent=2)  # YAML 1.2 reads JSON

    @staticmethod
    def _write_rewind_wrapper(node: Node) -> None:
        # pg_rewind as Patroni calls it, except once after fail_next_rewind(node): then it fails as one cut short
        # while it copied files from the leader does, leaving the files it had begun empty (pg_hba.conf among them,
        # as in the campaign run a switchover cut one short). Patroni runs ``pg_rewind --help`` to see that it is
        # there; that always works. (A rewind that fails and leaves the directory whole, Patroni simply retries.)
        node.rewind_wrapper.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" != --help ] && rm "{node.rewind_failure}" 2>/dev/null; then\n'
            f'  : > "{node.datadir}/pg_hba.conf"\n'
            '  echo "pg_rewind: error: cut short by the failover campaign" >&2; exit 1\n'
            "fi\n"
            f'exec "{_bindir()}/pg_rewind" "$@"\n',
            encoding="utf-8",
        )
        node.rewind_wrapper.chmod(0o755)

    def fail_next_rewind(self, node: Node) -> None:
        """Make node's next pg_rewind fail, as one cut short by a leader change does: with the data directory
        left unusable."""
        node.rewind_failure.touch()
        if os.geteuid() == 0:
            shutil.chown(node.rewind_failure, OS_USER)

    def rewind_failed(self, node: Node) -> bool:
        """Whether the failure fail_next_rewind(node) asked for has happened."""
        return not node.rewind_failure.exists()

    def start_node(self, node: Node) -> None:
        """Start node's Patroni (which starts its PostgreSQL, as a new cluster's leader or a standby)."""
        with node.log.open("ab") as log:
            node.process = self._popen([*_as_server_user(), self.patroni_bin, str(node.config)], log)
        root = _cgroup2_root()
        if root is not None:
            group = root / node.cgroup
            group.mkdir(exist_ok=True)
            # Patroni starts PostgreSQL after this, so the postmaster and its children are in it too.
            (group / "cgroup.procs").write_text(f"{node.process.pid}\n")

    def partition(self, node: Node) -> None:
        """Cut node from everything while it runs: every packet its processes send is dropped (to etcd,
        its standbys, its clients), and every packet to its PostgreSQL and REST ports."""
        for rule in self._partition_rules(node):
            _iptables("-I", *rule)

    def heal(self, node: Node) -> None:
        """Undo partition(node)."""
        for rule in self._partition_rules(node):
            with suppress(AssertionError):
                _iptables("-D", *rule)

    @staticmethod
    def _partition_rules(node: Node) -> list[list[str]]:
        return [
            ["OUTPUT", "-m", "cgroup", "--path", node.cgroup, "-j", "DROP"],
            ["INPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(node.port), "-j", "DROP"],
            ["INPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(node.api_port), "-j", "DROP"],
        ]

    def members(self) -> list[dict[str, Any]]:
        """The cluster's members as Patroni's REST API lists them (name, role, state, lag), from any node."""
        for node in self.nodes:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{node.api_port}/cluster", timeout=2) as answer:
                    return list(json.load(answer).get("members", []))
            except OSError:
                continue
        return []

    def leader(self) -> Node | None:
        """The node holding the leader key whose own Patroni says it runs as primary, or None."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                node = self.by_name(member["name"])
                state = node.state() or {}
                if state.get("role") in ("primary", "master") and state.get("state") == "running":
                    return node
        return None

    def by_name(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def standbys(self) -> list[Node]:
        """The nodes streaming from the leader."""
        return [
            self.by_name(m["name"])
            for m in self.members()
            if m.get("role") in ("replica", "sync_standby") and m.get("state") in ("running", "streaming")
        ]

    def healthy(self) -> bool:
        """A running leader, every other node streaming from it on its timeline, and (synchronous mode) a
        synchronous standby. A node that has only started again is not enough: a demoted leader runs as a
        standby for a moment before Patroni stops it to rewind it, and a rewind a switchover cuts short can
        leave it unable to start (as in a campaign run)."""
        members = self.members()
        leaders = [m for m in members if m.get("role") == "leader" and m.get("state") == "running"]
        if len(leaders) != 1:
            return False
        timeline = leaders[0].get("timeline")
        streaming = [m for m in members if m.get("state") == "streaming" and m.get("timeline") == timeline]
        sync = [m for m in streaming if m.get("role") == "sync_standby"]
        return len(streaming) == len(self.nodes) - 1 and (bool(sync) or not self.synchronous)

    def wait_healthy(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        self.wait_for(self.healthy, "every other node streaming from the leader, one of them synchronously", timeout)

    def lag_bytes(self, node: Node) -> int | None:
        """How far node is behind the WAL position the leader last published, as Patroni counts it for a
        failover (None when Patroni does not say)."""
        for member in self.members():
            if member.get("name") == node.name and isinstance(member.get("lag"), int):
                return int(member["lag"])
        return None

    def synchronous_standby(self) -> Node | None:
        """The node Patroni names the synchronous standby, or None."""
        sync = [m["name"] for m in self.members() if m.get("role") == "sync_standby"]
        return self.by_name(sync[0]) if sync else None

    @contextmanager
    def write_burst(self, node: Node, size_bytes: int) -> Iterator[None]:
        """Keep a transaction open on node, for the block, that has written about size_bytes of WAL and never
        commits: what its standbys lag behind while it is held from them is WAL no acknowledged commit needs."""
        rows = size_bytes // 1024
        conn = psycopg.connect(self.node_url(node, "postgres"), connect_timeout=2)  # not autocommit: it stays open
        try:
            conn.execute("CREATE TABLE write_burst (filler text)")
            conn.execute("INSERT INTO write_burst SELECT repeat('x', 1000) FROM generate_series(1, %s)", (rows,))
            yield
        finally:
            with suppress(psycopg.Error):
                conn.close()

    def log_tails(self) -> str:
        """The end of each node's log, and where the cluster's folder is (kept when the test fails)."""
        parts = [f"the cluster's folder: {self.folder}"]
        for node in self.nodes:
            parts.append(f"--- {node.name} ({node.log}), last {LOG_TAIL_LINES} lines ---\n{node.log_tail()}")
        return "\n".join(parts)

    def commits_promptly(self, database: str, within: float = PROMPT_COMMIT_SECONDS, times: int = 3) -> bool:
        """Healthy, and times commits in a row on the leader (each waits for the synchronous standby) took less
        than within seconds each."""
        leader = self.leader()
        if leader is None or not self.healthy():
            return False
        try:
            with psycopg.connect(self.node_url(leader, database), autocommit=True, connect_timeout=2) as conn:
                for _ in range(times):
                    started = time.monotonic()
                    # txid_current() gives the transaction an id: its commit waits for the synchronous standby.
                    conn.execute("SELECT txid_current()")
                    if time.monotonic() - started >= within:
                        return False
        except psycopg.Error:
            return False
        return True

    def wait_for(self, condition: Any, what: str, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster did not reach {what} within {timeout:g} s: {self.members()}")
            time.sleep(0.5)

    def kill(self, node: Node) -> None:
        """Lose node: SIGKILL its Patroni and its postmaster together (the postmaster's children follow)."""
        pids = [p for p in (node.process.pid if node.process else None, node.postmaster_pid()) if p]
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if node.process is not None:
            node.process.wait(timeout=30)
            node.process = None
        self._wait_postmaster_gone(node)

    def _wait_postmaster_gone(self, node: Node) -> None:
        # The postmaster's children notice its death and exit within a moment.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            # "--": the pattern starts with a dash, which pgrep would read as an option (and exit 2).
            done = subprocess.run(["pgrep", "-f", "--", f"-D {node.datadir}"], capture_output=True, check=False)
            if done.returncode == 1:
                return
            time.sleep(0.2)

    def walreceivers(self, node: Node) -> list[int]:
        """The pids of node's WAL receiver (a standby's process streaming from the primary)."""
        postmaster = node.postmaster_pid()
        if postmaster is None:
            return []
        argv = ["pgrep", "-P", str(postmaster), "-f", "walreceiver"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return [int(pid) for pid in done.stdout.split()]

    @contextmanager
    def lagging(self, leader: Node) -> Iterator[None]:
        """Hold back the WAL the standbys receive from leader for the block, as a slow link would: every
        packet the leader sends to a standby's WAL receiver is dropped (iptables, by the receiver's
        port), so what it commits meanwhile stays in its own send queue; the rules go after."""
        rules = [
            ["INPUT", "-p", "tcp", "-s", "127.0.0.1", "--sport", str(leader.port), "--dport", str(port), "-j", "DROP"]
            for node in self.nodes
            if node is not leader
            for port in self._receiver_ports(node, leader)
        ]
        for rule in rules:
            _iptables("-I", *rule)
        try:
            yield
        finally:
            for rule in rules:
                with suppress(AssertionError):
                    _iptables("-D", *rule)

    def _receiver_ports(self, node: Node, leader: Node) -> list[int]:
        """The local ports of node's WAL receiver connections to leader."""
        pids = set(self.walreceivers(node))
        done = subprocess.run(
            ["ss", "-Htnp", "state", "established", f"( dport = :{leader.port} )"],
            capture_output=True,
            text=True,
            check=False,
        )
        ports = []
        for line in done.stdout.splitlines():
            if any(f"pid={pid}," in line for pid in pids):
                local = line.split()[2]  # Recv-Q Send-Q Local:Port Peer:Port Process
                ports.append(int(local.rsplit(":", 1)[1]))
        return ports

    def switchover(self, candidate: Node) -> None:
        """``patronictl switchover`` to candidate, as an operator does for maintenance."""
        leader = self.leader()
        assert leader is not None, "no leader to switch over from"
        done = subprocess.run(
            [
                *_as_server_user(),
                str(Path(self.patroni_bin).with_name("patronictl")),
                "-c",
                str(leader.config),
                "switchover",
                "--leader",
                leader.name,
                "--candidate",
                candidate.name,
                "--force",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    def query(self, node: Node, database: str, sql: str) -> list[tuple[Any, ...]]:
        """Rows of sql on one node (a standby answers reads)."""
        with psycopg.connect(self.node_url(node, database), autocommit=True) as conn:
            cursor = conn.execute(sql)
            return list(cursor.fetchall()) if cursor.description else []

    def stop(self) -> None:
        """Heal every partition, stop every node and etcd, remove their cgroups; leave the folder."""
        for node in self.nodes:
            self.heal(node)
        for node in self.nodes:
            if node.process is not None:
                with suppress(ProcessLookupError):
                    node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.kill(node)
                node.process = None
            pid = node.postmaster_pid()
            if pid:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        root = _cgroup2_root()
        for node in self.nodes:
            if root is not None:
                with suppress(OSError):
                    (root / node.cgroup).rmdir()
        if self.etcd is not None:
            self.etcd.terminate()
            with suppress(subprocess.TimeoutExpired):
                self.etcd.wait(timeout=10)
            self.etcd = None


@contextmanager
def patroni_cluster(patroni_bin: str, *, synchronous: bool = True) -> Iterator[PatroniCluster]:
    """A started cluster in a folder of its own (under the system's temporary folder, which the
    postgres user can reach, unlike pytest's), stopped and removed after, unless cluster.keep was set
    (or DECISIONFLOW_KEEP_PATRONI); when it does not start, each node's log tail is printed."""
    cluster = PatroniCluster(
        Path(tempfile.mkdtemp(prefix="decisionflow-patroni-")), synchronous=synchronous, patroni_bin=patroni_bin
    )
    try:
        try:
            cluster.start()
        except BaseException:
            cluster.keep = True
            print(f"\nthe cluster did not start:\n{cluster.log_tails()}")
            raise
        yield cluster
    finally:
        cluster.stop()
        if cluster.keep or os.environ.get(KEEP_ENV):
            print(f"\nthe cluster's logs are kept in {cluster.folder}")
        else:
            shutil.rmtree(cluster.folder, ignore_errors=True)

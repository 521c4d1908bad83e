"""Worker processes: one server per process on one port, as gRPC's multiprocessing example does.

gRPC's core does not survive a fork once a channel or server exists, so the parent forks every
worker before any gRPC object exists; each worker then builds its own server, bound to the same
port with SO_REUSEPORT (the kernel spreads new connections across them), its own database engine
and pool. The parent serves nothing: it forwards SIGTERM, SIGINT and SIGHUP to the workers,
announces the port once every worker is serving, and exits when all workers have (status 0 when
each did; otherwise the first other status). A worker that fails, at start or later, ends the
others, so a supervisor restarts the whole service; a parent killed outright (SIGKILL) takes its
workers with it (Linux: PR_SET_PDEATHSIG), so none is left holding the port.

One address, one service: SO_REUSEPORT lets any process of the same user join the port, and the
kernel would then split connections between two services with two databases. So before it forks,
the parent claims the port (``claim``) and holds the claim for its lifetime; a second service
started on the port, with one worker or many, finds the claim taken and is refused before it
opens its database. What was measured on Linux 6.x decided the form of the claim:

- a plain socket bound on the port without SO_REUSEPORT (the obvious exclusive claim) also
  refuses the parent's own workers: their binds fail with EADDRINUSE, because every socket on a
  port must set SO_REUSEPORT (and share the user) to share it; a claim socket that sets
  SO_REUSEPORT, or SO_REUSEADDR while not listening, lets any other process's SO_REUSEPORT bind
  through again;
- one listening socket handed to the workers would refuse every other program, but gRPC's
  Python API cannot serve on a socket it did not bind;
- so the claim is a lock named by the port: an abstract Unix socket (``@decisionflow-port-P``).
  Unlike a lock file it lives in the same network namespace as the port (two containers with
  their own networks never see each other's), it needs no directory, and the kernel drops it
  with the last process holding it (a parent killed by SIGKILL takes its workers with it, so
  the claim never outlives the port's listeners). It is named by the port alone, not host and
  port, because 0.0.0.0:P, [::]:P and 127.0.0.1:P overlap.

What the claim cannot stop, the kernel does: a program that binds the port without
SO_REUSEPORT, or as another user, is refused while the workers listen. Only a program of the
same user that sets SO_REUSEPORT itself could still join. A service with one worker binds
without SO_REUSEPORT and needs no claim: the kernel refuses every other socket on its port.

With port 0 the parent picks the port: it binds a socket with SO_REUSEPORT on port 0 and keeps
it (bound, never listening, so it takes no connections) until the workers are done, so that no
other process can take the port between workers; the claim is then taken on the port it got.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import signal
import socket
import sys
from collections.abc import Callable, Iterator

from decisionflow.addresses import UNIX_SCHEMES, split_host_port

logger = logging.getLogger(__name__)

# The status of a worker that raised instead of returning one.
FAILED_STATUS = 1
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # prctl(2)

Ready = Callable[[int], None]
"""Called by a worker once its server is serving, with the port it bound."""

Worker = Callable[[int, str, Ready], int]
"""Serve as worker number index (from 0) on address; call ready(port) once serving; return the exit status."""


class WorkerLogFields(logging.Filter):
    """Adds the worker's number and process id to every log record of a worker process."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self._index = index

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate record (never drops one)."""
        record.worker = self._index
        record.pid = os.getpid()
        return True


def mark_worker_logs(index: int) -> None:
    """Make every handler of the root logger annotate records with this worker's number and pid."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(WorkerLogFields(index))


class AddressClaimed(OSError):
    """Another service holds the claim on the port (EADDRINUSE)."""


@contextlib.contextmanager
def claim(address: str) -> Iterator[str]:
    """Hold the claim on address's port for this process and its workers; yield address with port 0
    replaced by the port held for them. Raise AddressClaimed when another service holds it."""
    if address.startswith(UNIX_SCHEMES):
        yield address
        return
    host, port = split_host_port(address)
    with contextlib.ExitStack() as held:
        if port == 0:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            holder = held.enter_context(socket.socket(family, socket.SOCK_STREAM))
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            holder.bind((host, 0))
            port = int(holder.getsockname()[1])
            address = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        held.enter_context(_port_lock(port))
        yield address


def claim_name(port: int) -> str:
    """Return the abstract Unix socket name that claims port (without its leading NUL)."""
    return f"decisionflow-port-{port}"


@contextlib.contextmanager
def _port_lock(port: int) -> Iterator[None]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lock:
        try:
            lock.bind("\0" + claim_name(port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise AddressClaimed(
                errno.EADDRINUSE, f"{os.strerror(errno.EADDRINUSE)} (another service's workers hold port {port})"
            ) from exc
        yield


class _Workers:
    """The parent's view of its workers: who still runs, what they reported, how they ended."""

    def __init__(self, ready_read: int) -> None:
        self.live: set[int] = set()
        self.status = 0
        self.stopping = False  # SIGTERM or SIGINT was forwarded
        self._ready_read = ready_read
        self._reported = b""

    def signal_all(self, signum: int) -> None:
        for child in sorted(self.live):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    def reap(self, *, block: bool) -> None:
        """Note the workers that have exited; a failed one stops the others (the service is down)."""
        while self.live:
            pid, wait_status = os.waitpid(-1, 0 if block else os.WNOHANG)
            if pid == 0:
                return
            if pid not in self.live:
                continue
            self.live.discard(pid)
            code = os.waitstatus_to_exitcode(wait_status)
            if code != 0:
                logger.warning("worker process %d exited with status %d; stopping the others", pid, code)
                if self.status == 0:
                    self.status = code if code > 0 else 128 - code
                self.signal_all(signal.SIGTERM)
            if block:
                return

    def await_ready(self, count: int) -> int | None:
        """Return the port once count workers reported it; None once a worker ended before that."""
        while self._reported.count(b"\n") < count:
            if len(self.live) < count:
                return None
            readable, _, _ = select.select([self._ready_read], [], [], 0.1)
            if readable:
                chunk = os.read(self._ready_read, 64)
                self._reported += chunk
            self.reap(block=False)
        return int(self._reported.split(b"\n", 1)[0])


def run_workers(count: int, address: str, worker: Worker, announce: Ready) -> int:
    """Fork count workers serving address; announce(port) once all serve; return the exit status. The
    caller holds the claim on the port (claim) and passes the address it yielded."""
    ready_read, ready_write = os.pipe()
    workers = _Workers(ready_read)
    parent = os.getpid()

    def forward(signum: int, _frame: object) -> None:
        if signum != signal.SIGHUP:
            workers.stopping = True
        workers.signal_all(signum)

    # Installed before the first fork, so a signal never finds the parent without them; each
    # worker puts the default actions back before it serves.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        for index in range(count):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child, which never returns
                os.close(ready_read)
                os._exit(_run_child(worker, index, address, ready_write, parent))
            workers.live.add(pid)
        os.close(ready_write)
        port = workers.await_ready(count)
        if port is not None:
            announce(port)
        elif not workers.stopping:
            logger.error("a worker ended before every worker was serving; stopping the others")
            workers.signal_all(signal.SIGTERM)
        while workers.live:
            workers.reap(block=True)
        # Stopped by a signal before every worker served: as a single process, 0 when each drained.
        return workers.status if port is not None or workers.stopping else workers.status or FAILED_STATUS
    finally:
        os.close(ready_read)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _die_with_parent(parent: int) -> None:
    """A worker whose parent was killed (SIGKILL: no forwarding) is killed too, never left serving the port."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(FAILED_STATUS)


def _run_child(worker: Worker, index: int, address: str, ready_write: int, parent: int) -> int:
    _die_with_parent(parent)
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    mark_worker_logs(index)

    def ready(port: int) -> None:
        os.write(ready_write, f"{port}\n".encode("ascii"))

    try:
        return worker(index, address, ready)
    except BaseException:
        logger.exception("worker %d failed", index)
        return FAILED_STATUS
    finally:
        sys.stdout.flush()
        sys.stderr.flush()

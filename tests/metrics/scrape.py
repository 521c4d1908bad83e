"""Reading a metrics endpoint over HTTP as a test sees it: each sample by name and labels."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    """Every sample of one scrape: (name, sorted labels) -> value."""

    samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float]

    def value(self, name: str, **labels: str) -> float:
        """The value of the sample with exactly these labels; KeyError when it is not exposed."""
        return self.samples[(name, tuple(sorted(labels.items())))]

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of name whose labels include these (0 when there is none)."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= set(ls))

    @property
    def names(self) -> frozenset[str]:
        """Every sample name exposed (counters with _total, histograms with _bucket/_sum/_count)."""
        return frozenset(name for name, _ in self.samples)


def scrape(port: int, path: str = "/metrics") -> Scrape:
    """GET http://127.0.0.1:port/path and parse the exposition."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        text = response.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return Scrape(samples)


def scrape_settled(port: int, timeout: float = 30) -> Scrape:
    """Scrape once every started call is counted as handled: gRPC sends a refusal's status from
    within the abort, so a caller may hear it an instant before the server has counted the call."""
    deadline = time.monotonic() + timeout
    seen = scrape(port)
    while not _settled(seen) and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = scrape(port)
    return seen


def _settled(seen: Scrape) -> bool:
    return seen.total("grpc_server_started_total") == seen.total("grpc_server_handled_total")


def health_status(port: int) -> int:
    """The HTTP status /healthz answers with."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        error.close()
        return error.code


def wait_until(condition: Callable[[], bool], timeout: float = 60, poll: float = 0.1) -> bool:
    """Poll condition until it holds (True) or timeout passes (False); never asserts a speed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return True
        except OSError:
            pass  # the endpoint is not up yet
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)

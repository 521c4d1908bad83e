"""Named failpoints: a crash or an error at a named place, enabled only by configuration.

A spec is a comma-separated list of ``name=action`` where action is ``exit`` (the
process ends at once with status 86, as if killed: no cleanup, no flush) or ``raise``
(a ``FailpointError`` is raised at that place). ``name=action@N`` fires only on the N-th
hit. Unknown names are refused so a typo cannot silently disable a test.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from decisionflow_server.foundation.settings import Setting

EXIT_STATUS = 86


class FailpointError(RuntimeError):
    """Raised by a failpoint configured with the ``raise`` action."""

    def __init__(self, name: str) -> None:
        super().__init__(f"failpoint {name} fired")
        self.name = name


@dataclass(frozen=True, slots=True)
class _Rule:
    action: str
    on_hit: int  # 0: every hit


class Failpoints:
    """The failpoints a process was configured with; ``hit(name)`` acts on an enabled one."""

    def __init__(self, spec: str, known: Iterable[str]) -> None:
        self._known = frozenset(known)
        self._rules: dict[str, _Rule] = {}
        self._hits: dict[str, int] = {}
        self._lock = threading.Lock()
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, sep, action = part.partition("=")
            if not sep:
                raise ValueError(f"failpoint {part!r}: expected name=exit or name=raise")
            action, _, nth = action.partition("@")
            if name not in self._known:
                raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(sorted(self._known))}")
            if action not in ("exit", "raise"):
                raise ValueError(f"failpoint {name}: action must be exit or raise, not {action!r}")
            self._rules[name] = _Rule(action, int(nth) if nth else 0)

    @property
    def enabled(self) -> frozenset[str]:
        """Names of the failpoints that can fire."""
        return frozenset(self._rules)

    def hit(self, name: str) -> None:
        """Act on the failpoint called name if it is enabled; otherwise do nothing."""
        if name not in self._known:
            raise ValueError(f"unknown failpoint {name!r}")
        rule = self._rules.get(name)
        if rule is None:
            return
        with self._lock:
            self._hits[name] = count = self._hits.get(name, 0) + 1
        if rule.on_hit and count != rule.on_hit:
            return
        if rule.action == "exit":
            sys.stderr.write(f"failpoint {name}: exiting the process\n")
            sys.stderr.flush()
            os._exit(EXIT_STATUS)
        raise FailpointError(name)


def failpoints_setting(service: str, names: Sequence[str], example: str) -> Setting[str]:
    """The ``--failpoints`` setting of a server (``DECISIONFLOW_<SERVICE>_FAILPOINTS``): its spec, refused at
    start-up when it names a failpoint not among names (a typo would otherwise wait for the first call)."""

    def parse(value: str) -> str:
        Failpoints(value, names)
        return value

    return Setting(
        "failpoints",
        f"DECISIONFLOW_{service}_FAILPOINTS",
        f"fault injection, e.g. {example} (names: {', '.join(names)})",
        "",
        parse=parse,
    )

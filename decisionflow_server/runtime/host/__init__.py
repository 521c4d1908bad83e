"""One host for every service: a server process from its command line to its exit status.

A service's ``main.py`` lists its parts (a ``Service``: names, schema, status table, receive
limits, and its ``create_server``, which builds its store, use cases and servicers on a
``Host``) and its commands; everything else is here, written once:

- ``Host`` (``_lifecycle``): the start-up steps in order, each clean-up pushed on one
  ``AsyncExitStack``; stop unwinds it (jobs, NOT_SERVING and drain, then the rest in reverse);
- ``command_line``, ``run``, ``serve`` (``_process``): the ``migrate``/housekeeping/``serve`` commands,
  one process or forked workers under the address claim, the listening line, SIGHUP reloads and
  one line for a start-up failure.
"""

from decisionflow_server.runtime.host._lifecycle import Host, Job, ServerConfig, Service, ServiceMetrics, Wiring
from decisionflow_server.runtime.host._process import (
    Command,
    announce_listening,
    command_line,
    run,
    serve,
    serve_workers,
)

__all__ = [
    "Command",
    "Host",
    "Job",
    "ServerConfig",
    "Service",
    "ServiceMetrics",
    "Wiring",
    "announce_listening",
    "command_line",
    "run",
    "serve",
    "serve_workers",
]

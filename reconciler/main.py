"""Wiring of the decisionflow-reconciler command: configuration, channels, passes, output and exit status.

The only reader of the environment. ``--once`` runs one pass and exits 0 (nothing older than the
alert threshold is left unconfirmed), 1 (something is) or 2 (could not run: bad configuration,
orchestrator unreachable or refusing). ``--interval SECONDS`` runs a pass every SECONDS, serves
Prometheus metrics if a metrics port is set, and exits 0 after SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import TextIO

import grpc

from decisionflow.channels import check_cleartext_token, open_channel
from decisionflow.client import DecisionflowError, OperationsClient, ReceiverClient
from decisionflow.retry import CLIENT_DEFAULT, NO_RETRY
from decisionflow_server.foundation import logs, startup_errors
from decisionflow_server.foundation.startup_errors import StartupError
from decisionflow_server.runtime import grpc_core_logs, startup
from reconciler import config as configuration
from reconciler.config import ReconcilerConfig
from reconciler.domain import PassSettings, PassSummary
from reconciler.metrics import ReconcilerMetrics
from reconciler.service import Reconciler

logger = logging.getLogger("decisionflow.reconciler")
PROGRAM = "decisionflow-reconciler"
SERVICE = "reconciler"
# What decides whether the channels may carry the token: the targets, TLS, or the explicit opt-in.
CHANNEL_SETTINGS = (
    configuration.ORCHESTRATOR_TARGET,
    configuration.RECEIVER_TARGET,
    configuration.CA_FILE,
    configuration.INSECURE_CLEARTEXT_TOKEN,
)

EXIT_OK = 0
EXIT_UNKNOWN_TOO_OLD = 1
EXIT_COULD_NOT_RUN = 2


def utc_now() -> datetime:
    """Return the current time in UTC."""
    return datetime.now(UTC)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def render_text(summary: PassSummary) -> str:
    """Return the human summary of one pass: a few lines an operator can read at a glance."""
    r = summary.redriven
    lines = [
        f"reconciler pass: examined {summary.examined} in {summary.duration_seconds:.2f} s"
        + ("" if summary.completed else " (stopped early)"),
        f"  settled:       {summary.settled} committed by lookup"
        + (f", {summary.already_settled} already settled elsewhere" if summary.already_settled else ""),
        f"  re-driven:     {r.total} (committed {r.committed}, unknown {r.unknown}, rejected {r.rejected}, "
        f"already settled {r.already_settled}, failed {r.failed})",
        f"  still unknown: {summary.still_unknown} (oldest {_age(summary.oldest_unknown_age_seconds)}; "
        f"{summary.unknown_older_than_alert} older than {_age(summary.alert_after_seconds)})",
        f"  escalated:     {summary.escalated} (never re-driven: first attempt beyond the receiver's key retention)",
    ]
    if summary.lookup_failures:
        lines.append(f"  lookup failures: {summary.lookup_failures} (those operations stay open with the error noted)")
    return "\n".join(lines)


def _emit(summary: PassSummary, as_json: bool, out: TextIO) -> None:
    out.write((json.dumps(summary.as_json(), sort_keys=True) if as_json else render_text(summary)) + "\n")
    out.flush()


def _notice(message: str, **fields: object) -> None:
    """Write an info line on stderr, as JSON like every other, whatever the log level (default warning):
    progress of a long pass and where metrics are served were always shown. The summary is on stdout."""
    sys.stderr.write(logs.json_line(logger.name, logging.INFO, message, service=SERVICE, **fields) + "\n")
    sys.stderr.flush()


def _failure_fields(error: DecisionflowError) -> dict[str, object]:
    return {"service": SERVICE, "code": error.code.name, "reason": error.reason or None}


@contextmanager
def open_channels(config: ReconcilerConfig) -> Iterator[tuple[grpc.Channel, grpc.Channel]]:
    """Yield channels to the orchestrator and the receiver (TLS with a CA file), each carrying only its
    own service's token on every call; an unusable CA file, or a token that would travel in cleartext
    beyond loopback, raises StartupError."""
    startup.check_ca_file(config.ca_file, configuration.CA_FILE)
    # One token per service: the receiver never sees the operator token, the orchestrator never the reader's.
    aimed = ((config.orchestrator_target, config.orchestrator_token), (config.receiver_target, config.receiver_token))
    with startup.refusing_cleartext(CHANNEL_SETTINGS):
        for target, token in aimed:
            check_cleartext_token(
                target, ca_file=config.ca_file, token=token, allow_cleartext_token=config.allow_cleartext_token
            )
    orchestrator, receiver = (
        open_channel(target, ca_file=config.ca_file, token=token, allow_cleartext_token=config.allow_cleartext_token)
        for target, token in aimed
    )
    try:
        yield orchestrator, receiver
    finally:
        receiver.close()
        orchestrator.close()


def build_reconciler(
    config: ReconcilerConfig,
    orchestrator: grpc.Channel,
    receiver: grpc.Channel,
    *,
    should_stop: Callable[[], bool] = lambda: False,
    metrics: ReconcilerMetrics | None = None,
) -> Reconciler:
    """Return a Reconciler over the two channels, configured as config says."""
    timeout = config.timeout_seconds
    return Reconciler(
        OperationsClient(orchestrator, timeout=timeout, policy=CLIENT_DEFAULT),
        ReceiverClient(receiver, timeout=timeout, policy=CLIENT_DEFAULT),
        PassSettings(
            grace=config.grace,
            alert_after=config.alert_after,
            batch_size=config.batch_size,
            redrive_enabled=not config.no_redrive,
            # A re-drive lands within one call deadline; that much of the key retention is kept in reserve.
            redrive_margin=config.timeout,
        ),
        clock=utc_now,
        receiver_single_attempt=ReceiverClient(receiver, timeout=timeout, policy=NO_RETRY),
        progress=_notice,
        lookup_latency=None if metrics is None else metrics.lookup_latency.observe,
        should_stop=should_stop,
    )


def run_once(config: ReconcilerConfig, out: TextIO = sys.stdout) -> int:
    """Run one pass, print its summary, and return the exit status."""
    with (
        open_channels(config) as (orchestrator, receiver),
        build_reconciler(config, orchestrator, receiver) as reconciler,
    ):
        try:
            summary = reconciler.run_pass()
        except DecisionflowError as error:
            target = config.orchestrator_target
            logger.error("could not run: orchestrator at %s: %s", target, error, extra=_failure_fields(error))
            return EXIT_COULD_NOT_RUN
    _emit(summary, config.json, out)
    return EXIT_UNKNOWN_TOO_OLD if summary.alerting else EXIT_OK


def run_interval(config: ReconcilerConfig, out: TextIO = sys.stdout) -> int:
    """Run a pass every interval until SIGTERM or SIGINT; return 0 after a clean stop."""
    assert config.interval_seconds is not None
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        logger.info("received signal %d: stopping after the current batch", signum)
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    metrics = ReconcilerMetrics(unhealthy_after_failed_passes=config.unhealthy_after_failed_passes)
    server = None
    try:
        if config.metrics_port is not None:
            server = metrics.serve(config.metrics_port, config.metrics_address)
            _notice(f"metrics on http://{config.metrics_address}:{server.port}/metrics", port=server.port)
        with (
            open_channels(config) as (orchestrator, receiver),
            build_reconciler(config, orchestrator, receiver, should_stop=stop.is_set, metrics=metrics) as reconciler,
        ):
            while not stop.is_set():
                try:
                    summary = reconciler.run_pass()
                except DecisionflowError as error:
                    # A loop outlives orchestrator restarts: report, count, and try again next interval.
                    metrics.pass_failed()
                    logger.warning("pass failed: %s", error, extra=_failure_fields(error))
                else:
                    metrics.record(summary)
                    _emit(summary, config.json, out)
                    if summary.lookups_all_failed:
                        logger.warning(
                            "pass failed: every lookup at the receiver %s failed (%d operations left open)",
                            config.receiver_target,
                            summary.lookup_failures,
                        )
                stop.wait(config.interval_seconds)
    finally:
        if server is not None:
            server.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the decisionflow-reconciler command; returns the process exit status."""
    config = configuration.load(sys.argv[1:] if argv is None else argv, os.environ)
    logs.configure(config.log_level)
    debug = config.log_level == "debug"
    # Exit 1 means "Unknowns are too old": a failure to run, of any kind, must not be mistaken for it.
    try:
        with grpc_core_logs.routed(config.grpc_log_level):
            return run_once(config) if config.once else run_interval(config)
    except StartupError as error:
        startup_errors.report(PROGRAM, error, logger, debug=debug, service=SERVICE)
    except Exception as exc:
        failure = startup_errors.runtime_error("failed", (), f"{type(exc).__name__}: {startup_errors.describe(exc)}")
        failure.__cause__ = exc
        startup_errors.report(PROGRAM, failure, logger, debug=debug, service=SERVICE)
    return EXIT_COULD_NOT_RUN


if __name__ == "__main__":
    sys.exit(main())

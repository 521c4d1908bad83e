"""Key retention at the receiver: effects applied longer ago than ``--key-retention-seconds`` are
deleted with their business records, in batches, by ``decisionflow-receiver prune-keys`` or by a
periodic job in the server (``--prune-interval-seconds``; decisionflow_server.runtime.periodic).

A pruned key no longer deduplicates: a lookup answers NOT_FOUND and a new Apply would write the
effect again. The retention is advertised on every response, so the reconciler never re-drives an
operation whose first attempt is older than it and escalates it instead (reconciler/domain.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine

from decisionflow_server.foundation import logs
from decisionflow_server.foundation.settings import Setting, SettingError, parse_settings
from decisionflow_server.runtime import housekeeping_commands
from decisionflow_server.runtime.periodic import PeriodicJob, PeriodicMetrics, Schedule, Wording
from decisionflow_server.storage import migrating
from effect_receiver import config as configuration
from effect_receiver.errors import Unavailable
from effect_receiver.service import Clock, utc_now
from effect_receiver.store import EffectStore

logger = logging.getLogger("effect_receiver")

PROGRAM = "decisionflow-receiver"
COMMAND = "prune-keys"
DESCRIPTION = (
    "delete the effects (keys and business records) applied longer ago than the key retention; their "
    "operations can no longer be deduplicated, and the reconciler escalates instead of re-driving them"
)
# What prune-keys reads: the same database and retention as the server.
HOUSEKEEPING_SETTINGS: tuple[Setting[Any], ...] = (
    configuration.DATABASE_URL,
    configuration.SERVER.database_url_file,
    configuration.KEY_RETENTION_SECONDS,
    configuration.SERVER.logs.level,
)
# Rows per transaction: a large prune never holds the write lock (SQLite) or its row locks for long.
PRUNE_BATCH = 500


def prune_keys(
    store: EffectStore, retention: timedelta, now: datetime, *, dry_run: bool, batch: int = PRUNE_BATCH
) -> int:
    """Delete (or count, on a dry run) the effects applied before now - retention, batch rows per transaction."""
    cutoff = now - retention
    if dry_run:
        return store.count_keys_before(cutoff)
    total = 0
    while True:
        deleted = store.prune_keys_before(cutoff, limit=batch)
        total += deleted
        if deleted < batch:
            return total


JOB = "prune-keys"
PRUNE_WORDING = Wording(
    paused="pruning keys paused, %s; trying again every %g s",
    resumed="pruning keys resumed after %d failed runs",
    failed="pruning keys failed; trying again in %.0f s",
)


async def prune_once(store: EffectStore, retention: timedelta, clock: Clock = utc_now) -> int:
    """Prune once, in a worker thread, and say how many keys were deleted; return that count."""
    deleted = await asyncio.to_thread(prune_keys, store, retention, clock(), dry_run=False)
    if deleted:
        logger.info(
            "pruned %d keys older than the key retention of %.0f s",
            deleted,
            retention.total_seconds(),
            extra={"service": "effect_receiver"},
        )
    return deleted


def prune_job(
    store: EffectStore,
    retention: timedelta | None,
    interval: float,
    *,
    metrics: PeriodicMetrics | None = None,
    clock: Clock = utc_now,
) -> PeriodicJob | None:
    """The server's prune job: keys older than the retention pruned once at start and then every interval,
    in every worker and replica (a batch deletes what is still there); None when keys are kept forever or
    the interval is 0."""
    if retention is None or interval <= 0:
        return None
    return PeriodicJob(
        JOB,
        lambda: prune_once(store, retention, clock),
        Schedule(interval),
        logger=logger,
        wording=PRUNE_WORDING,
        service="effect_receiver",
        metrics=metrics,
    )


def main(args: Sequence[str], schema: migrating.Schema) -> int:
    """Run ``decisionflow-receiver prune-keys``; return the exit status (2 for usage, as argparse does)."""
    cli = housekeeping_commands.parser(PROGRAM, COMMAND, DESCRIPTION, HOUSEKEEPING_SETTINGS)
    ns = cli.parse_args(list(args))
    try:
        values = parse_settings(ns, HOUSEKEEPING_SETTINGS, os.environ)
        retention = values.required(configuration.KEY_RETENTION_SECONDS)
        database_url = values.required_one_of(configuration.DATABASE_URL, configuration.SERVER.database_url_file)
    except SettingError as error:
        cli.error(str(error))
    level = values.required(configuration.SERVER.logs.level)
    logs.configure(level)

    def prune(engine: Engine) -> int:
        try:
            pruned = prune_keys(EffectStore(engine), retention, utc_now(), dry_run=ns.dry_run)
        except Unavailable as error:
            # Batches already deleted stay deleted; running the command again finishes the work.
            logger.error("%s: %s", COMMAND, error, extra={"service": "effect_receiver"})
            return 1
        what = f"keys (effects and their records) applied more than {retention.total_seconds():.0f} s ago"
        housekeeping_commands.report_count(COMMAND, dry_run=ns.dry_run, noun="keys", count=pruned, what=what)
        return 0

    return housekeeping_commands.on_existing_database(
        schema, COMMAND, database_url, prune, logger, debug=level == "debug"
    )

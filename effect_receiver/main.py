"""Wiring of the receiver process: configuration, database, server; the only reader of the environment.

``decisionflow-receiver serve`` (the default: flags alone also serve) runs the server; ``migrate``
upgrades the schema (decisionflow_server.storage.migrating).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from sqlalchemy.engine import Engine

from decisionflow.v1 import effect_receiver_pb2
from decisionflow_server.runtime.failpoints import Failpoints
from decisionflow_server.runtime.faults import FaultInterceptor
from decisionflow_server.runtime.host import Host, Service, Wiring, command_line
from decisionflow_server.runtime.serving import ReceiveLimits
from decisionflow_server.storage import migrating
from effect_receiver import housekeeping
from effect_receiver.config import (
    DATABASE_URL,
    REPLICA_DATABASE_URL,
    SERVER,
    ReceiverConfig,
    load,
)
from effect_receiver.domain import MAX_BATCH_LOOKUP, MAX_PAYLOAD_BYTES
from effect_receiver.failpoints import FAILPOINT_NAMES
from effect_receiver.grpc_api import STATUS_TABLE, EffectReceiverServicer, register
from effect_receiver.metrics import ReceiverMetrics
from effect_receiver.schema import VERSION_TABLE
from effect_receiver.service import ReceiverService
from effect_receiver.store import MIGRATIONS, EffectStore

logger = logging.getLogger("effect_receiver")
PROGRAM = "decisionflow-receiver"
SCHEMA = migrating.Schema(
    PROGRAM,
    "effect_receiver",
    MIGRATIONS,
    VERSION_TABLE,
    DATABASE_URL,
    SERVER.database_url_file,
    SERVER.migrate,
    SERVER.logs.level,
)

_SERVICE = "/" + effect_receiver_pb2.DESCRIPTOR.services_by_name["EffectReceiverService"].full_name + "/"
# Each method receives at most its largest valid request: Apply the payload cap and 4 KiB for its
# ids and digest; BatchLookup 1,000 operation ids of 70 characters, each with its 2-byte field header.
RECEIVE_LIMITS = ReceiveLimits(
    {
        _SERVICE + "Apply": MAX_PAYLOAD_BYTES + 4 * 1024,
        _SERVICE + "BatchLookup": MAX_BATCH_LOOKUP * 72 + 4 * 1024,
    }
)


class ReceiverServer(Host):
    """A running receiver: the host's server and parts, and its fault injection when configured."""

    faults: FaultInterceptor | None = None  # set only when fault injection is configured


async def create_server(config: ReceiverConfig) -> ReceiverServer:
    """Migrate the primary database and start serving on config.address, port 0 picking a free port (the
    steps of decisionflow_server.runtime.host). A setting that stops it, or a database or port that is not ready, raises
    StartupError naming the setting; listening beyond loopback without TLS and authentication raises
    ExposureRefused."""
    metrics = ReceiverMetrics()
    faults = FaultInterceptor(config.faults) if config.faults.enabled else None

    async def build(host: Host, primary: Engine) -> Wiring:
        replica = None
        if config.replica_database_url:
            # A replica is read-only and gets its schema from the primary, so it is not migrated.
            replica = host.engine(config.replica_database_url, REPLICA_DATABASE_URL)
        store = EffectStore(primary)
        service = ReceiverService(
            store,
            replica=None if replica is None else EffectStore(replica),
            failpoints=Failpoints(config.failpoints, FAILPOINT_NAMES),
            key_retention=config.key_retention,
        )
        prune = housekeeping.prune_job(
            store, config.key_retention, config.prune_interval_seconds, metrics=metrics.periodic
        )
        return Wiring(
            register(EffectReceiverServicer(service)),
            # Faults come after authentication: a refused caller gets its refusal, never an injected fault.
            interceptors=() if faults is None else (faults,),
            jobs=() if prune is None else (prune,),
        )

    running = await ReceiverServer.start(SERVICE, config, metrics, build)
    running.faults = faults
    if faults is not None:
        logger.warning("fault injection on: %s", config.faults, extra={"service": "effect_receiver"})
    return running


SERVICE: Service[ReceiverConfig] = Service(
    name="effect_receiver",
    program=PROGRAM,
    logger=logger,
    schema=SCHEMA,
    address=SERVER.address,
    status_table=STATUS_TABLE,
    receive=RECEIVE_LIMITS,
    create=create_server,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run decisionflow-receiver (``serve``, the default, ``migrate`` or ``prune-keys``); returns the exit status."""

    def prune_keys(args: list[str]) -> int:
        return housekeeping.main(args, SCHEMA)

    def load_config(args: list[str]) -> ReceiverConfig:
        return load(args, os.environ)

    argv = sys.argv[1:] if argv is None else argv
    return command_line(SERVICE, argv, os.environ, load_config, {housekeeping.COMMAND: prune_keys})


if __name__ == "__main__":
    sys.exit(main())

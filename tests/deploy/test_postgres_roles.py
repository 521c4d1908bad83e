"""deploy/postgres-init.sh on a real PostgreSQL server: one role per service, owning its own database
only. Each service migrates and serves as its own role, reading its URL (with the password
make-secrets.sh generated) from a file; the receiver's role cannot reach the orchestrator's tables,
and neither role can connect to the maintenance databases.

The script revokes CONNECT on postgres and template1 from PUBLIC, a change to the whole cluster, so
it runs on a scratch server of the test's own (initdb), never on the machine's shared one."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import psycopg
import pytest

from decisionflow.v1 import common_pb2, review_pb2_grpc
from tests.campaigns.pgcluster import postgres_server
from tests.deploy.made import ROOT, copy_repository, run_make_secrets
from tests.support.servers import spawn
from tests.support.stack import approve, start_request

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("psql") is None, reason="psql runs deploy/postgres-init.sh"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make the secrets"),
]


@dataclass(frozen=True)
class Roles:
    """The roles and databases postgres-init.sh made, and the superuser's URL."""

    admin_url: str
    prefix: str
    secrets: Path

    def url(self, role: str, database: str) -> str:
        """A URL logging in as PREFIX+role, with its generated password, to database PREFIX+database."""
        password = (self.secrets / f"{role}-database.password").read_text().strip()
        server = urlsplit(self.admin_url)
        host = f"{server.hostname}:{server.port or 5432}"
        return f"postgresql://{self.prefix}{role}:{password}@{host}/{self.prefix}{database}"


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[Roles]:
    """Run make-secrets.sh, then postgres-init.sh (with a prefix on the names) on a scratch server that
    checks passwords for every role but the superuser."""
    clone = copy_repository(tmp_path / "clone")
    made = run_make_secrets(clone)
    assert made.returncode == 0, made.stderr
    with postgres_server() as server:  # skips (or fails in CI) without PostgreSQL's binaries
        (server.datadir / "pg_hba.conf").write_text(
            "host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n", encoding="utf-8"
        )
        server.query("SELECT pg_reload_conf()")
        found = Roles(server.url(), f"dftest_{uuid.uuid4().hex[:8]}_", clone / "deploy" / "secrets")
        init = subprocess.run(
            ["bash", str(ROOT / "deploy" / "postgres-init.sh")],
            env={
                "PATH": "/usr/bin:/bin",
                "PGHOST": "127.0.0.1",
                "PGPORT": str(server.port),
                "POSTGRES_USER": "postgres",
                "POSTGRES_DB": "postgres",
                "DECISIONFLOW_SECRETS_DIR": str(found.secrets),
                "DECISIONFLOW_DATABASE_PREFIX": found.prefix,
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert init.returncode == 0, init.stderr
        yield found


def test_each_service_migrates_and_serves_as_its_own_role(roles: Roles, tmp_path: Path) -> None:
    receiver_url = tmp_path / "receiver-database.url"
    receiver_url.write_text(roles.url("receiver", "receiver") + "\n")
    orchestrator_url = tmp_path / "orchestrator-database.url"
    orchestrator_url.write_text(roles.url("orchestrator", "orchestrator") + "\n")
    receiver = spawn(
        "effect_receiver.main", ["--address", "127.0.0.1:0", "--database-url-file", str(receiver_url)], tmp_path, "r"
    )
    try:
        orchestrator = spawn(
            "orchestrator.main",
            [
                "--address",
                "127.0.0.1:0",
                "--database-url-file",
                str(orchestrator_url),
                "--receiver-target",
                receiver.target,
                "--checkpoint-keys-file",
                str(roles.secrets / "checkpoint.keys"),
            ],
            tmp_path,
            "o",
        )
        try:
            with grpc.insecure_channel(orchestrator.target) as channel:
                stub = review_pb2_grpc.ReviewServiceStub(channel)
                started = stub.StartReview(start_request(), timeout=30)
                decided = stub.Approve(approve(started.proposal.operation_id), timeout=30)
            assert decided.outcome == common_pb2.OUTCOME_COMMITTED
        finally:
            assert orchestrator.stop() == 0
    finally:
        assert receiver.stop() == 0

    with psycopg.connect(roles.admin_url.rsplit("/", 1)[0] + f"/{roles.prefix}orchestrator") as admin:
        owners = {row[0] for row in admin.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")}
        decisions = admin.execute("SELECT count(*) FROM decisions").fetchone()
    assert owners == {f"{roles.prefix}orchestrator"}
    assert decisions == (1,)
    with psycopg.connect(roles.admin_url.rsplit("/", 1)[0] + f"/{roles.prefix}receiver") as admin:
        owners = {row[0] for row in admin.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")}
    assert owners == {f"{roles.prefix}receiver"}

    # The receiver's role can neither read nor write the orchestrator's tables: it cannot even connect.
    for role, database in (("receiver", "orchestrator"), ("orchestrator", "receiver")):
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            psycopg.connect(roles.url(role, database), connect_timeout=5).close()

    # And were CONNECT granted by mistake, the tables grant it nothing either.
    orchestrator_db = roles.admin_url.rsplit("/", 1)[0] + f"/{roles.prefix}orchestrator"
    with psycopg.connect(orchestrator_db, autocommit=True) as admin:
        admin.execute(f'GRANT CONNECT ON DATABASE "{roles.prefix}orchestrator" TO "{roles.prefix}receiver"')
    with psycopg.connect(roles.url("receiver", "orchestrator"), autocommit=True) as intruder:
        writes = ("DELETE FROM public.checkpoints", "UPDATE public.operations SET state = 'x'")
        for statement in ("SELECT count(*) FROM public.decisions", *writes):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                intruder.execute(statement)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            intruder.execute("CREATE TABLE public.planted (x int)")


def test_public_cannot_connect_to_either_database(roles: Roles) -> None:
    with psycopg.connect(roles.admin_url, autocommit=True) as admin:
        stranger = f"{roles.prefix}stranger"
        admin.execute(f'CREATE ROLE "{stranger}" LOGIN')
        try:
            for service in ("orchestrator", "receiver"):
                granted = admin.execute(
                    "SELECT has_database_privilege(%s, %s, 'CONNECT'), has_database_privilege(%s, %s, 'CREATE')",
                    (stranger, roles.prefix + service, stranger, roles.prefix + service),
                ).fetchone()
                assert granted == (False, False)
                owner = admin.execute(
                    "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", (roles.prefix + service,)
                ).fetchone()
                assert owner == (roles.prefix + service,)
        finally:
            admin.execute(f'DROP ROLE "{stranger}"')


def test_each_role_connects_to_its_own_database_and_no_other(roles: Roles) -> None:
    for role in ("orchestrator", "receiver"):
        psycopg.connect(roles.url(role, role), connect_timeout=5).close()
        own = roles.url(role, role).rsplit("/", 1)[0]
        for database in ("postgres", "template1"):
            with pytest.raises(psycopg.OperationalError, match=f'permission denied for database "{database}"'):
                psycopg.connect(f"{own}/{database}", connect_timeout=5).close()
    # The superuser, as the compose healthcheck and the image's entrypoint connect, still can.
    psycopg.connect(roles.admin_url, connect_timeout=5).close()

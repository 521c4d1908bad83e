#!/usr/bin/env bash
# One PostgreSQL role per service, owning its own database and nothing else: the orchestrator role
# owns database orchestrator (shared by the replicas), the receiver role owns database receiver, and
# PUBLIC may not connect to either, so neither service can read or write the other's tables. PUBLIC
# may not connect to the maintenance databases (postgres, template1, POSTGRES_DB) either: each role
# connects to its own database and to no other (the superuser is not bound by CONNECT).
#
# The postgres image runs it once, on an empty data directory (docker-entrypoint-initdb.d), as the
# superuser. Each role's password is read from SECRETS/<service>-database.password, written by
# deploy/make-secrets.sh; it never appears on a command line or in the environment.
#   DECISIONFLOW_SECRETS_DIR       where the password files are (default /run/secrets)
#   DECISIONFLOW_DATABASE_PREFIX   prefix of every role and database name (default none)
#   POSTGRES_USER, POSTGRES_DB     the superuser and database to connect as (set by the image);
#                                  PGHOST, PGPORT and the other libpq variables apply as usual
set -euo pipefail
secrets=${DECISIONFLOW_SECRETS_DIR:-/run/secrets}
prefix=${DECISIONFLOW_DATABASE_PREFIX:-}

for service in orchestrator receiver; do
  password_file=$secrets/$service-database.password
  if [ ! -r "$password_file" ]; then
    echo "postgres-init: cannot read $password_file (run deploy/make-secrets.sh)" >&2
    exit 1
  fi
  psql --no-psqlrc -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    -v name="$prefix$service" -v password_file="$password_file" <<'SQL'
\set password `cat :'password_file'`
CREATE ROLE :"name" LOGIN PASSWORD :'password';
CREATE DATABASE :"name" OWNER :"name";
REVOKE ALL ON DATABASE :"name" FROM PUBLIC;
\connect :"name"
-- What PostgreSQL 15 made the default, on every version: only the owner creates in schema public.
ALTER SCHEMA public OWNER TO :"name";
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT ALL ON SCHEMA public TO :"name";
SQL
done

psql --no-psqlrc -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
  -v maintenance="${POSTGRES_DB:-postgres}" <<'SQL'
REVOKE CONNECT, TEMPORARY ON DATABASE postgres, template1 FROM PUBLIC;
REVOKE CONNECT, TEMPORARY ON DATABASE :"maintenance" FROM PUBLIC;
SQL
echo "postgres-init: roles and databases ${prefix}orchestrator and ${prefix}receiver created;" \
  "PUBLIC may not connect to postgres, template1 or ${POSTGRES_DB:-postgres}"

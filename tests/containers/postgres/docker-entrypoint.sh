#!/usr/bin/env bash
# What the postgres image's entrypoint does for docker-compose.yml: on an empty PGDATA, initdb with
# the superuser POSTGRES_USER and the password in POSTGRES_PASSWORD_FILE, password (scram-sha-256)
# authentication from the network, then each /docker-entrypoint-initdb.d/*.sh and *.sql run against a
# server listening on its socket only; then the server itself, listening on every address.
set -euo pipefail
user=${POSTGRES_USER:-postgres}
database=${POSTGRES_DB:-$user}
if [ "$(id -u)" = 0 ]; then
  echo "docker-entrypoint: run as the postgres user (compose: user: postgres)" >&2
  exit 1
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb --username="$user" --pwfile="${POSTGRES_PASSWORD_FILE:?POSTGRES_PASSWORD_FILE is required}" \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  pg_ctl --silent --wait --options="-c listen_addresses=''" start
  if [ "$database" != postgres ]; then
    psql --no-psqlrc -v ON_ERROR_STOP=1 --username "$user" --dbname postgres -c "CREATE DATABASE \"$database\""
  fi
  for script in /docker-entrypoint-initdb.d/*; do
    case $script in
      *.sh) if [ -x "$script" ]; then "$script"; else . "$script"; fi ;;
      *.sql) psql --no-psqlrc -v ON_ERROR_STOP=1 --username "$user" --dbname "$database" -f "$script" ;;
      *) ;;
    esac
  done
  pg_ctl --silent --wait --mode=fast stop
  echo "docker-entrypoint: PostgreSQL init process complete; ready for start up"
fi
if [ "${1:-}" = postgres ]; then
  shift
  exec postgres -c listen_addresses='*' "$@"
fi
exec "$@"

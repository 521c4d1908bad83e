#!/usr/bin/env bash
# Creates the secrets docker-compose.yml mounts, one file per secret (see docs/deployment.md):
#   ca/ca.key, ca/ca.pem      the private CA; ca/ is never mounted anywhere
#   ca.pem                    the CA certificate clients verify servers with
#   SERVICE.pem, SERVICE.key  a server certificate (serverAuth) per service name:
#                             receiver, orchestrator-1, orchestrator-2 (compose; each also names
#                             the alias orchestrator both replicas answer to), and orchestrator,
#                             the one the orchestrator replicas share on Kubernetes; receiver and
#                             orchestrator also name their Kubernetes Service DNS names in the
#                             namespace DECISIONFLOW_KUBERNETES_NAMESPACE (default decisionflow)
#   receiver-credentials/credentials.json      hashed bearer tokens the receiver accepts:
#                                              orchestrator.token, reconciler-receiver.token
#   orchestrator-credentials/credentials.json  hashed bearer tokens the orchestrators accept:
#                                              reconciler-orchestrator.token, audit-monitor.token,
#                                              relay.token, author.token, reviewer.token
#                             Each credentials file has a folder of its own, which compose mounts
#                             whole: the servers re-read the file on SIGHUP, and a mounted folder shows
#                             the file `decisionflow token new` (or an editor) puts in its place, where a
#                             file mounted alone would stay the one that was there at start-up.
#   orchestrator.token        effect_writer: the orchestrator's calls to the receiver
#   reconciler-orchestrator.token  operator: the reconciler's calls to the orchestrator
#   reconciler-receiver.token      effect_reader: the reconciler's calls to the receiver
#   audit-monitor.token       auditor: the audit monitor's calls to the orchestrator (consistency proofs)
#   relay.token               auditor: the relay's watch of the orchestrator's event feed (WatchEvents)
#   author.token, reviewer.token   for people using the decisionflow command; mounted nowhere
# One token per caller and service: a service never receives a token the other service accepts.
#   checkpoint.keys           the orchestrators' checkpoint HMAC key
#   audit-signing.key         the orchestrators' Ed25519 key that signs the audit log's checkpoints
#                             (docs/audit-log.md), named after DECISIONFLOW_AUDIT_ORIGIN (default
#                             decisionflow.local/audit)
#   audit-log.vkey            its verifier key (public): give it to auditors; the console and the
#                             audit monitor read it
#   postgres.password         the PostgreSQL superuser's password
#   {orchestrator,receiver}-database.password   each service's PostgreSQL role password
#   {orchestrator,receiver}-database.url        the URL each service connects with
#   console-session.key       the key the console signs its session cookies with (docker-compose.console.yml)
#   console-client-secret     EMPTY: write the client secret your OpenID provider issued for the console
#                             into it; the console refuses to start while it is empty
# Files are 0640 and folders 0750, owned by the user running the script; the containers read them
# through that user's group (its id is written to the project's .env as DECISIONFLOW_SECRETS_GID).
#
# Run once before `docker compose up`, from any directory:
#   deploy/make-secrets.sh [OUT_DIR]        (default: the deploy/secrets folder beside this script)
# For Kubernetes: deploy/make-secrets.sh deploy/kubernetes/overlays/production/common/secrets
# Needs openssl and the project's virtual environment (make setup); DECISIONFLOW=/path/to/decisionflow
# and DECISIONFLOW_ORCHESTRATOR=/path/to/decisionflow-orchestrator override the commands used.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
root=$(dirname -- "$here")
out=${1:-$here/secrets}
namespace=${DECISIONFLOW_KUBERNETES_NAMESPACE:-decisionflow}
case $namespace in
  *[!a-z0-9-]* | '' | -* | *-)
    echo "make-secrets: DECISIONFLOW_KUBERNETES_NAMESPACE=$namespace is not a Kubernetes namespace name" >&2
    exit 1
    ;;
esac
out=$(mkdir -p -- "$(dirname -- "$out")" && cd -- "$(dirname -- "$out")" && pwd -P)/$(basename -- "$out")

if [ -n "${DECISIONFLOW:-}" ]; then
  decisionflow=("$DECISIONFLOW")
elif [ -x "$root/.venv/bin/decisionflow" ]; then
  decisionflow=("$root/.venv/bin/decisionflow")
elif [ -x "$root/.venv/bin/python" ]; then
  decisionflow=("$root/.venv/bin/python" -m decisionflow_cli)
elif command -v decisionflow >/dev/null; then
  decisionflow=(decisionflow)
else
  echo "make-secrets: no decisionflow command: run 'make setup' in $root first (or set DECISIONFLOW)" >&2
  exit 1
fi
if [ -n "${DECISIONFLOW_ORCHESTRATOR:-}" ]; then
  orchestrator=("$DECISIONFLOW_ORCHESTRATOR")
elif [ -x "$root/.venv/bin/decisionflow-orchestrator" ]; then
  orchestrator=("$root/.venv/bin/decisionflow-orchestrator")
elif [ -x "$root/.venv/bin/python" ]; then
  orchestrator=("$root/.venv/bin/python" -m orchestrator.main)
elif command -v decisionflow-orchestrator >/dev/null; then
  orchestrator=(decisionflow-orchestrator)
else
  echo "make-secrets: no decisionflow-orchestrator command: run 'make setup' in $root first" \
    "(or set DECISIONFLOW_ORCHESTRATOR)" >&2
  exit 1
fi
command -v openssl >/dev/null || { echo "make-secrets: openssl is needed" >&2; exit 1; }

if [ -e "$out" ]; then
  echo "make-secrets: $out already exists; remove it to start over" >&2
  exit 1
fi

if [ "$(id -u)" = 0 ]; then
  echo "make-secrets: warning: run as root, the containers will read the secrets through group $(id -g);" \
    "an ordinary user's own group is safer (see docs/deployment.md)" >&2
fi

umask 027
work=$(mktemp -d "$(dirname -- "$out")/.$(basename -- "$out").XXXXXX")
trap 'rm -rf -- "$work"' EXIT
cd -- "$work"
mkdir ca
chmod 700 ca

openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=decisionflow-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout ca/ca.key -out ca/ca.pem 2>/dev/null
cp ca/ca.pem ca.pem

# A certificate for one service name: usable only to serve (serverAuth), valid for the compose name
# and for loopback (the healthcheck inside the container calls localhost), and for any further DNS
# names given after it.
server_certificate() {
  local name=$1
  shift
  local names="DNS:$name" extra
  for extra in "$@"; do
    names="$names,DNS:$extra"
  done
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" -keyout "$name.key" -out "$name.csr" 2>/dev/null
  printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=$names,DNS:localhost,IP:127.0.0.1" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca/ca.pem -CAkey ca/ca.key -CAcreateserial -CAserial ca/ca.srl \
    -days 825 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f -- "$name.csr" "$name.ext"
}
# A Kubernetes Service's names: NAME within its namespace, NAME.NAMESPACE(.svc(.cluster.local)) beyond.
service_certificate() {
  server_certificate "$1" "$1.$namespace" "$1.$namespace.svc" "$1.$namespace.svc.cluster.local"
}
service_certificate receiver
# Compose's orchestrator replicas: each its own name, and the network alias "orchestrator" both answer
# to, which the reconciler and the console dial (docker-compose.yml).
for service in orchestrator-1 orchestrator-2; do
  server_certificate "$service" orchestrator
done
service_certificate orchestrator

mkdir orchestrator-credentials receiver-credentials
token() {
  local service=$1
  shift
  "${decisionflow[@]}" token new --file "$service-credentials/credentials.json" "$@"
}
token receiver --principal orchestrator --role effect_writer >orchestrator.token
token receiver --principal reconciler --role effect_reader >reconciler-receiver.token
token orchestrator --principal reconciler --role operator >reconciler-orchestrator.token
token orchestrator --principal audit-monitor --role auditor >audit-monitor.token
token orchestrator --principal relay --role auditor >relay.token
token orchestrator --principal author --role author >author.token
token orchestrator --principal reviewer --role reviewer >reviewer.token

openssl rand -hex 32 >checkpoint.keys
# The audit log's signing key; the command prints its verifier key in one JSON line.
"${orchestrator[@]}" audit-keygen --out audit-signing.key 2>/dev/null >audit-keygen.json
sed -n 's/.*"vkey": "\([^"]*\)".*/\1/p' audit-keygen.json >audit-log.vkey
rm -f -- audit-keygen.json
[ -s audit-log.vkey ] || { echo "make-secrets: audit-keygen printed no verifier key" >&2; exit 1; }
openssl rand -hex 32 >console-session.key
: >console-client-secret
openssl rand -hex 24 >postgres.password
for service in orchestrator receiver; do
  openssl rand -hex 24 >"$service-database.password"
  printf 'postgresql://%s:%s@postgres:5432/%s\n' "$service" "$(cat "$service-database.password")" "$service" \
    >"$service-database.url"
done

find . -type d -exec chmod 750 {} +
find . -type f -exec chmod 640 {} +
chmod 700 ca
chmod 600 ca/ca.key
if [ -e "$out" ]; then
  echo "make-secrets: $out appeared while the secrets were being made; nothing was written" >&2
  exit 1
fi
mv -- "$work" "$out"
trap - EXIT

# docker compose reads the project's .env: the group the containers join to read the secrets.
env_file=$root/.env
touch "$env_file"
grep -v '^DECISIONFLOW_SECRETS_GID=' "$env_file" >"$env_file.tmp" || true
printf 'DECISIONFLOW_SECRETS_GID=%s\n' "$(id -g)" >>"$env_file.tmp"
mv -- "$env_file.tmp" "$env_file"
echo "make-secrets: wrote the CA, server certificates, tokens, checkpoint key, audit log key and database passwords to $out"
echo "make-secrets: the audit log's verifier key, for auditors: $(cat "$out/audit-log.vkey")"
echo "make-secrets: set DECISIONFLOW_SECRETS_GID=$(id -g) in $env_file"
echo "make-secrets: for the review console, write the client secret your OpenID provider issued into" \
  "$out/console-client-secret (left empty; see docs/deployment.md#the-review-console)"

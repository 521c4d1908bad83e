#!/usr/bin/env bash
# Creates what docker-compose.yml mounts at /run/decisionflow: a private CA and one server
# certificate for every service name, the credentials file of hashed bearer tokens, a token file
# per calling service and the checkpoint HMAC key. Run once before `docker compose up`:
#   deploy/make-secrets.sh [OUT_DIR]        (default deploy/secrets)
# Needs openssl and the decisionflow command (make setup provides .venv/bin/decisionflow).
set -euo pipefail
out=${1:-$(dirname "$0")/secrets}
decisionflow=${DECISIONFLOW:-decisionflow}
command -v "$decisionflow" >/dev/null || decisionflow="$(dirname "$0")/../.venv/bin/decisionflow"
mkdir -p "$out"
chmod 700 "$out"
cd "$out"
if [ -e credentials.json ]; then
  echo "make-secrets: $out already holds credentials.json; remove the folder to start over" >&2
  exit 1
fi

openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=decisionflow-ca" \
  -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=decisionflow-server" -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:receiver,DNS:orchestrator-1,DNS:orchestrator-2,DNS:localhost,IP:127.0.0.1\n' > san.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 \
  -extfile san.ext -out server.pem 2>/dev/null
rm -f server.csr san.ext ca.srl

"$decisionflow" token new --principal orchestrator --role effect_writer --role effect_reader \
  --file credentials.json > orchestrator.token
"$decisionflow" token new --principal reconciler --role operator --role effect_reader \
  --file credentials.json > reconciler.token
"$decisionflow" token new --principal author --role author --file credentials.json > author.token
"$decisionflow" token new --principal reviewer --role reviewer --file credentials.json > reviewer.token
printf 'DECISIONFLOW_CHECKPOINT_KEYS=%s\n' "$(openssl rand -hex 32)" > checkpoint.env
# The services run as uid 10001 inside the containers.
chmod 644 ca.pem server.pem credentials.json
chmod 640 server.key ./*.token checkpoint.env
echo "make-secrets: wrote CA, server certificate, credentials and tokens to $out"

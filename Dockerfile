# One image for every decisionflow process: decisionflow-receiver, decisionflow-orchestrator,
# decisionflow-reconciler, decisionflow-relay, decisionflow-console and the decisionflow client/health commands.
#
# The base is python:3.11-slim pinned by digest: the multi-platform index of python:3.11-slim
# (3.11.15 on Debian trixie) published on 2026-08-05, so a rebuild gets the same base until this line
# changes. To move to a newer base, replace the digest with the one `docker buildx imagetools inspect
# python:3.11-slim` prints. Any base with Python 3.11+, its venv module and the passwd tools will do:
#   docker build --build-arg BASE=registry.example.com/python:3.11-slim@sha256:... -t decisionflow:0.1.0 .
# (CI builds on a Debian bookworm base it makes with mmdebstrap: docs/deployment.md#building-the-image.)
ARG BASE=python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/decisionflow/venv PATH=/opt/decisionflow/venv/bin:$PATH
WORKDIR /opt/decisionflow

# Every third-party package from the lock, each checked against its hashes: a package missing from the
# lock, or a file whose hash differs, fails the build (tools/lock_image.sh regenerates the lock).
# A virtual environment, so the base's own Python packages (a distribution's python3) are never touched.
COPY requirements/image.lock requirements/image.lock
# A pip configuration for the build alone (a private index, a CA), e.g. mounted with podman build
# --volume; unset, pip uses PyPI. The image keeps neither the file nor the variable.
ARG PIP_CONFIG_FILE
RUN python3 -m venv "$VIRTUAL_ENV" \
    && pip install --require-hashes --only-binary :all: -r requirements/image.lock

COPY pyproject.toml README.md ./
# The light client (stubs, errors, retry policies, channels, clients) is its own distribution;
# the server distribution depends on it. Both are built from this context with the locked setuptools
# (no build isolation, no download) and installed without dependencies: the lock has them all, and
# pip check fails the build if it does not.
COPY clients/python ./clients/python
COPY decisionflow_server ./decisionflow_server
COPY orchestrator ./orchestrator
COPY effect_receiver ./effect_receiver
COPY reconciler ./reconciler
COPY decisionflow_relay ./decisionflow_relay
COPY decisionflow_cli ./decisionflow_cli
COPY decisionflow_console ./decisionflow_console
COPY decisionflow_demo ./decisionflow_demo
# The services run as uid/gid 10001 and read their mounted secrets through the supplementary group
# compose adds (docs/deployment.md), never through world-readable files.
# The only paths they write are the three mount points below, owned by 10001: the orchestrators publish the
# audit log's signed checkpoints to audit-publish, the audit monitor keeps the last one it saw in
# audit-monitor (docs/audit-log.md), the relay keeps its cursor file in relay (docs/events.md). A fresh named volume mounted there takes the directory's owner and
# mode, so it is writable by 10001 without a root step (Docker and podman both copy them up).
# The console extra serves decisionflow-console; the trial extra (the trial identity provider of
# `decisionflow demo --console`) is never installed in the image.
RUN pip install --no-deps --no-build-isolation ./clients/python '.[console]' \
    && pip check \
    && rm -rf build clients/python/build ./*.egg-info clients/python/src/*.egg-info \
    && groupadd --system --gid 10001 decisionflow \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin decisionflow \
    && install -d -o 10001 -g 10001 -m 0755 /var/lib/decisionflow/audit-publish /var/lib/decisionflow/audit-monitor /var/lib/decisionflow/relay

USER 10001:10001
EXPOSE 50051 50061 9102 8080
CMD ["decisionflow", "--help"]

# One image for every decisionflow process: decisionflow-receiver, decisionflow-orchestrator,
# decisionflow-reconciler, decisionflow-console and the decisionflow client/health commands.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/decisionflow

COPY pyproject.toml README.md ./
# The light client (stubs, errors, retry policies, channels, clients) is its own distribution;
# the server distribution depends on it, so both are installed by the one pip command below.
COPY clients/python ./clients/python
COPY decisionflow_server ./decisionflow_server
COPY orchestrator ./orchestrator
COPY effect_receiver ./effect_receiver
COPY reconciler ./reconciler
# The services run as uid/gid 10001 and read their mounted secrets through the supplementary group
# compose adds (docs/deployment.md), never through world-readable files.
# The console extra serves decisionflow-console; the trial extra (the trial identity provider of
# `decisionflow demo --console`) is never installed in the image.
RUN pip install ./clients/python '.[console]' \
    && groupadd --system --gid 10001 decisionflow \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin decisionflow

USER 10001:10001
EXPOSE 50051 50061 9102 8080
CMD ["decisionflow", "--help"]

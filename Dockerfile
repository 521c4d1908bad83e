# One image for every decisionflow process: decisionflow-receiver, decisionflow-orchestrator,
# decisionflow-reconciler and the decisionflow client/health commands.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/decisionflow

COPY pyproject.toml README.md ./
COPY decisionflow ./decisionflow
COPY orchestrator ./orchestrator
COPY effect_receiver ./effect_receiver
COPY reconciler ./reconciler
RUN pip install . && useradd --system --uid 10001 decisionflow

USER decisionflow
EXPOSE 50051 50061 9102
CMD ["decisionflow", "--help"]

"""The servers' shared package, a library in three layers; a module imports from its own layer or those below it.

- ``runtime``: what every serving process is made of (the host, serving and the one interceptor per
  served call, authentication, metrics, workers, access log, status mapping, tracing, failpoints).
- ``storage``: database engines, transactions, group commit, migrations, schema compatibility.
- ``foundation``: settings, start-up errors, the exposure check, strict JSON, log set-up and the
  other leaves everything above may use.

The light client (``decisionflow``: stubs, identities, vocabulary, reasons, retry policies, clients)
is its own distribution below all three; nothing here is importable from it. What a person runs or
deploys is a top-level package that imports this one: the services (``orchestrator``,
``effect_receiver``, ``reconciler``), the ``decisionflow`` command (``decisionflow_cli``), the review
console (``decisionflow_console``) and the demo (``decisionflow_demo``); nothing here imports any of them.
"""

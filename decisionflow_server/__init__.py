"""The servers' shared package, in four layers; a module imports from its own layer or those below it.

- ``apps``: what a person runs beside the services (the ``decisionflow`` command, the review console,
  the demo, the trial identity provider).
- ``runtime``: what every serving process is made of (the host, serving and the one interceptor per
  served call, authentication, metrics, workers, access log, status mapping, tracing, failpoints).
- ``storage``: database engines, transactions, group commit, migrations, schema compatibility.
- ``foundation``: settings, start-up errors, the exposure check, strict JSON, log set-up and the
  other leaves everything above may use.

The light client (``decisionflow``: stubs, identities, vocabulary, reasons, retry policies, clients)
is its own distribution below all four; nothing here is importable from it.
"""

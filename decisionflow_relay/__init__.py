"""decisionflow-relay: the orchestrator's event feed relayed into a NATS JetStream stream (docs/events.md).

A separate process that only watches: it reads ``EventService.WatchEvents`` from its cursor as an
auditor or operator, publishes each event as a CloudEvents 1.0 JSON document on
``<prefix>.<origin>.<kind>.<action>`` with ``Nats-Msg-Id: <origin>/<index>``, and stores the cursor
(the first index JetStream has not acknowledged) in its cursor file. At least once from the relay, and
JetStream's duplicate window drops the re-sends: a consumer sees each event once, and can always
deduplicate by the message id.

Modules: ``config`` (settings), ``domain`` (subjects, the CloudEvents document, the cursor's rule),
``cursor`` (the cursor file), ``jetstream`` (NATS), ``metrics`` (Prometheus), ``service`` (the relay),
``backoff`` and ``errors``, ``main`` (the decisionflow-relay command).
"""

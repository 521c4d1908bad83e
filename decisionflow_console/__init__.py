"""decisionflow-console: the review console in the browser (docs/console.md).

A separate ASGI service that signs people in with OpenID Connect and calls the orchestrator with
each person's own access token; it keeps no database and decides nothing the orchestrator would
refuse. Parts, one job each: ``config`` (settings), ``main`` (wiring), ``app`` (routes and layers),
``web`` (security headers, body bound, session lookup, access log, metrics), ``sessions``
(server-side sessions), ``csrf`` (form tokens), ``signin`` (OpenID Connect), ``orchestrator``
(the channel and per-person clients), ``access`` (which roles may use which page and action),
``navigation`` (the person's roles, read once per session, and the links they allow),
``access_pages`` (where each role lands, and the 403 of a page opened without its role),
``posts`` (reading a posted form: its CSRF check, a session that ended), ``refusals`` (every refusal
in words), ``words`` (every code in words), ``forms`` and ``diff`` (proposal forms and what
changed), ``pages`` (templates), ``review_pages``, ``operator_pages`` and ``audit_pages`` (the pages).
"""

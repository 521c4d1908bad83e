"""Test support: fixtures (registered as plugins by tests/conftest.py) and helpers the tests import.

databases (fresh SQLite files and PostgreSQL databases), stack (receiver + orchestrator in process or
as processes), receiver, secure, hostile, review_cli, reconciling, campaigns, payloads (Apply payloads
through decisionflow_server.foundation.payload), seeding (orchestrator and receiver rows through the stores), servers,
cli. Processes are started with decisionflow_server.foundation.processes, the launcher the demo and the bench use.
"""

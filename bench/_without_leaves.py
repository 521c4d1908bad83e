"""The orchestrator with its audit leaves left out: the baseline of ``python -m bench.audit_cost`` only.

Runs ``orchestrator.main`` with the two steps that make a leaf replaced, in this process alone: building its
entry (encoding and hashing) and inserting it in the event's transaction (``bench._store_leaves``). Every
other statement, and the schema, is the real orchestrator's. Never a way to run the service: its log would
miss every event.
"""

from __future__ import annotations

import sys

from bench._store_leaves import leaves_left_out
from orchestrator import main

if __name__ == "__main__":
    with leaves_left_out():
        status = main.main()
    sys.exit(status)

"""The end-to-end demo described in docs/demo.md (``decisionflow demo``).

workspace.py  the state directory: databases, credentials and tokens, checkpoint key, input files
children.py   child processes: services announcing a port, commands run to completion; stopping them
control.py    the control experiment's naive client (a fresh random key per attempt)
stack.py      the services and the clients that talk to them, and the transcript
story.py      the six steps and what they observed
audit_trail.py step 6: the audit log signed, exported, verified offline, and a forged copy refused
run.py        run_demo: the steps, the verdict (the last line, JSON), cleanup on every path
"""

from decisionflow_demo.children import DemoError
from decisionflow_demo.run import DemoOptions, run_demo

__all__ = ["DemoError", "DemoOptions", "run_demo"]

"""``python -m decisionflow_server.apps.cli``: the same as the ``decisionflow`` command."""

import sys

from decisionflow_server.apps.cli import main

sys.exit(main())

"""``python -m decisionflow_cli``: the same as the ``decisionflow`` command."""

import sys

from decisionflow_cli import main

sys.exit(main())

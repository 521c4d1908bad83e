"""``python -m decisionflow.cli``: the same as the ``decisionflow`` command."""

import sys

from decisionflow.cli import main

sys.exit(main())

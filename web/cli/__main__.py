"""``python -m web.cli``: the same as the ``agentcron`` command."""

import sys

from agentcron.web.cli import main

sys.exit(main())

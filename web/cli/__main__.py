"""``python -m web.cli``: the same as the ``agentcron`` command."""

import sys

from web.cli import main

sys.exit(main())

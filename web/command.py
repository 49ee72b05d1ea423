"""The ``agentcron`` command's entry point: the command line (``web.cli``) needs the server
extra (typer, rich, uvicorn), so without it the command says so in one line, exit status 2,
instead of an ImportError from the first import of ``web.cli``."""

from __future__ import annotations

import sys

from agentcron.core.extras import have, missing


def main() -> int:
    if not have("server"):
        sys.stderr.write(f"agentcron: {missing('server', 'the agentcron command')}\n")
        return 2
    from agentcron.web.cli import main as run

    return run()

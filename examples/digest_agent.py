"""The README's digest agent, a stand-in: reads the prompt on stdin, answers five bullets.

It calls no model, so the example runs as written on any machine; put your own agent in its
place (any program that reads the prompt on stdin and prints its answer works with the
``command`` runner: exit 0 = success, 75 = try again, else failure). It runs in the schedule's
working directory (``AGENTCRON_DATA_DIR/tasks/<owner>/<schedule id>``), so files it keeps
there, like the digest log, survive from one run to the next.
"""

import os
import sys
from datetime import UTC, datetime

prompt = sys.stdin.read().strip()
today = datetime.now(UTC).date().isoformat()
run_id = os.environ.get("AGENTCRON_RUN_ID", "?")
sys.stdout.write(f"Digest for {today} (run {run_id}), asked: {prompt[:200]}\n")
for number in range(1, 6):
    sys.stdout.write(f"- item {number}: what your agent would say\n")

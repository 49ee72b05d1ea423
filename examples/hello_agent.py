"""A stand-in agent for the example schedule: reads the prompt on stdin, answers on stdout.

Replace it with your own agent: any program that reads the prompt on stdin and prints its
answer works with the ``command`` runner (exit 0 = success, 75 = try again, else failure).
"""

import os
import sys
from datetime import UTC, datetime

prompt = sys.stdin.read().strip()
now = datetime.now(UTC).isoformat(timespec="seconds")
run_id = os.environ.get("AGENTCRON_RUN_ID", "?")
attempt = os.environ.get("AGENTCRON_ATTEMPT", "?")
sys.stdout.write(f"[{now}] run {run_id} (attempt {attempt})\n")
sys.stdout.write(f"prompt had {len(prompt.split())} words: {prompt[:200]}\n")

"""``python -m bench``: the burst benchmark (see ``bench.harness``)."""

from bench.harness import main

main()

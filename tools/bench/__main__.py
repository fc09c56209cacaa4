"""C{python -m tools.bench}: the benchmark, or one of the processes a workload starts."""

import sys

from tools.bench.cli import HELPERS, main

if len(sys.argv) == 5 and sys.argv[1] in HELPERS:
    HELPERS[sys.argv[1]](sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
else:
    raise SystemExit(main())

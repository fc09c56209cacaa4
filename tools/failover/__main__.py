import sys

from tools.failover.cli import main

sys.exit(main())

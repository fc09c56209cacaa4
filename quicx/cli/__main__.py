"""C{python -m quicx.cli}: the C{quicx} command (as C{quicx start --processes} runs each daemon)."""

import sys

from quicx.cli.app import main

sys.exit(main())

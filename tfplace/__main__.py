"""`python -m tfplace devices|env`: the tfplace command line."""

import sys

from tfplace.cli import main

sys.exit(main())

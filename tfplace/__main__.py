"""`python -m tfplace devices|env|trace`: the tfplace command line."""

import sys

from tfplace.cli import main

sys.exit(main())

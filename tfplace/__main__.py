"""`python -m tfplace devices|env|trace`: the tfplace command line."""

import sys

from tfplace.cli._cli import main

sys.exit(main())

"""`python -m tfplace devices|env|trace`: the tfplace command line."""

import sys

from tfplace._cli import main

sys.exit(main())

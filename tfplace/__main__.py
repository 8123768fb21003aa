"""`python -m tfplace devices|env|doctor|trace|profile|launch|diff|merge`: the tfplace command line."""

import sys

from tfplace.cli._cli import main

sys.exit(main())

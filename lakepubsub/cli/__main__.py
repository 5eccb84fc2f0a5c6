"""``python -m lakepubsub.cli``."""

import sys

from lakepubsub.cli import main

sys.exit(main())

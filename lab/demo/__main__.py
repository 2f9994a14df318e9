"""``python -m dprag.lab.demo [options]``: ``dprag demo`` before the entry point is installed."""

import sys

from dprag.lab.demo.cli import main

sys.exit(main())

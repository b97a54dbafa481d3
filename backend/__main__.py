"""``python -m backend``: the command-line entry (see backend/cli/)."""

import sys

from backend.cli import main

sys.exit(main())

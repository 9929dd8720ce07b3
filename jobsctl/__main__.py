"""``python -m jobsctl``: the ``jobs`` command."""

import sys

from .cli import main

sys.exit(main())

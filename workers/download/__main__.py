"""``python -m workers.download``: the command line is :func:`workers.download._cli.main`'s."""

from __future__ import annotations

import sys

from workers.download._cli import main

if __name__ == "__main__":
    sys.exit(main())

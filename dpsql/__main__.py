"""``python -m dpsql``: the command line (see :mod:`dpsql.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())

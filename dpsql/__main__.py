"""``python -m dpsql``: the command line (see :mod:`dpsql.api.cli`)."""

import sys

from dpsql.api.cli import main

if __name__ == "__main__":
    sys.exit(main())

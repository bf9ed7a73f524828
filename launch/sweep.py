"""``python launch/sweep.py ...`` = ``grpokit sweep ...``: runs grpokit.cli.sweep."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("sweep"))

"""``python launch/sweep.py ...`` = ``grpokit sweep ...``: runs grpokit.cli.sweep."""

import sys

from grpokit.cli.sweep import entry

if __name__ == "__main__":
    sys.exit(entry())

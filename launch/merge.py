"""``python launch/merge.py ...`` = ``grpokit merge ...``: runs grpokit.cli.merge."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("merge"))

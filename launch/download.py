"""``python launch/download.py ...`` = ``grpokit download ...``: runs grpokit.cli.download."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("download"))

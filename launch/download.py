"""``python launch/download.py ...`` = ``grpokit download ...``: runs grpokit.cli.download."""

import sys

from _shim import run  # launch/_shim.py: a hint when the kit is not installed in this Python

if __name__ == "__main__":
    sys.exit(run("download"))

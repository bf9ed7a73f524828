"""``python launch/cancel.py ...`` = ``grpokit cancel ...``: runs grpokit.cli.cancel."""

import sys

from _shim import run  # launch/_shim.py: a hint when the kit is not installed in this Python

if __name__ == "__main__":
    sys.exit(run("cancel"))

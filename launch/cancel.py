"""``python launch/cancel.py ...`` = ``grpokit cancel ...``: runs grpokit.cli.cancel."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("cancel"))

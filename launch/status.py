"""``python launch/status.py ...`` = ``grpokit status ...``: runs grpokit.cli.status."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("status"))

"""``python launch/logs.py ...`` = ``grpokit logs ...``: runs grpokit.cli.logs."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("logs"))

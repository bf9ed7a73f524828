"""``python launch/report.py ...`` = ``grpokit report ...``: runs grpokit.cli.report."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("report"))

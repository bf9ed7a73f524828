"""``python launch/report.py ...`` = ``grpokit report ...``: runs grpokit.cli.report."""

import sys

from grpokit.cli.report import entry

if __name__ == "__main__":
    sys.exit(entry())

"""``python launch/logs.py ...`` = ``grpokit logs ...``: runs grpokit.cli.logs."""

import sys

from grpokit.cli.logs import entry

if __name__ == "__main__":
    sys.exit(entry())

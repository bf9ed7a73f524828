"""``python launch/status.py ...`` = ``grpokit status ...``: runs grpokit.cli.status."""

import sys

from grpokit.cli.status import entry

if __name__ == "__main__":
    sys.exit(entry())

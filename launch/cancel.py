"""``python launch/cancel.py ...`` = ``grpokit cancel ...``: runs grpokit.cli.cancel."""

import sys

from grpokit.cli.cancel import entry

if __name__ == "__main__":
    sys.exit(entry())

"""``python launch/resubmit.py ...`` = ``grpokit resubmit ...``: runs grpokit.cli.resubmit."""

import sys

from grpokit.cli.resubmit import entry

if __name__ == "__main__":
    sys.exit(entry())

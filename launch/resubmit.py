"""``python launch/resubmit.py ...`` = ``grpokit resubmit ...``: runs grpokit.cli.resubmit."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("resubmit"))

"""``python launch/prepare_data.py ...`` = ``grpokit prepare-data ...``: runs grpokit.cli.prepare_data."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("prepare_data"))

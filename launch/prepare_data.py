"""``python launch/prepare_data.py ...`` = ``grpokit prepare-data ...``: runs grpokit.cli.prepare_data."""

import sys

from _shim import run  # launch/_shim.py: a hint when the kit is not installed in this Python

if __name__ == "__main__":
    sys.exit(run("prepare_data"))

"""``python launch/run.py ...`` = ``grpokit run ...``: runs grpokit.cli.run."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("run"))

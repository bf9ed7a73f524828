"""``python launch/run.py ...`` = ``grpokit run ...``: runs grpokit.cli.run."""

import sys

from grpokit.cli.run import entry

if __name__ == "__main__":
    sys.exit(entry())

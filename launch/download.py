"""``python launch/download.py ...`` = ``grpokit download ...``: runs grpokit.cli.download."""

import sys

from grpokit.cli.download import entry

if __name__ == "__main__":
    sys.exit(entry())

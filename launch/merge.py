"""``python launch/merge.py ...`` = ``grpokit merge ...``: runs grpokit.cli.merge."""

import sys

from grpokit.cli.merge import entry

if __name__ == "__main__":
    sys.exit(entry())

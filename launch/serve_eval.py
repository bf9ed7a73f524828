"""``python launch/serve_eval.py ...`` = ``grpokit serve-eval ...``: runs grpokit.cli.serve_eval."""

import sys

from grpokit.cli.serve_eval import entry

if __name__ == "__main__":
    sys.exit(entry())

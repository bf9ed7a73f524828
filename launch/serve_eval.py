"""``python launch/serve_eval.py ...`` = ``grpokit serve-eval ...``: runs grpokit.cli.serve_eval."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("serve_eval"))

"""``python launch/serve_eval.py ...`` = ``grpokit serve-eval ...``: runs grpokit.cli.serve_eval."""

import sys

from _shim import run  # launch/_shim.py: a hint when the kit is not installed in this Python

if __name__ == "__main__":
    sys.exit(run("serve_eval"))

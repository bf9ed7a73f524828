"""``python launch/make_tiny_model.py ...`` = ``grpokit make-tiny-model ...``: runs grpokit.cli.make_tiny_model."""

import sys

from _shim import run  # launch/_shim.py: a hint when the kit is not installed in this Python

if __name__ == "__main__":
    sys.exit(run("make_tiny_model"))

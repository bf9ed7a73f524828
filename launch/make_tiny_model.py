"""``python launch/make_tiny_model.py ...`` = ``grpokit make-tiny-model ...``: runs grpokit.cli.make_tiny_model."""

import sys

from grpokit.cli import shim

if __name__ == "__main__":
    sys.exit(shim("make_tiny_model"))

"""What every ``launch/<command>.py`` runs: ``grpokit.cli.shim``, or one line saying how to get the kit.

A launch script started with a Python that lacks the kit (the virtual environment not active)
would end in ``ModuleNotFoundError: No module named 'grpokit'``; this says what to do instead.
"""

import sys


def run(module: str) -> int:
    try:
        from grpokit.cli import shim
    except ModuleNotFoundError as exc:
        if exc.name != "grpokit":
            raise
        print(
            f"{sys.argv[0]}: No module named 'grpokit' in this Python ({sys.executable}): activate the kit's "
            "environment (source .venv/bin/activate; `make install` makes it) or install the kit into this one "
            "(pip install .)",
            file=sys.stderr,
        )
        return 2
    return shim(module)

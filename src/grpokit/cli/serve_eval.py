"""Serve the base and the trained (merged) model with vLLM and compare them on the test set.

Usage:
  python launch/serve_eval.py --run-dir logs/<sweep>/<NNN>_<slug> [--base MODEL] [--test-parquet F]
  python launch/serve_eval.py --base MODEL --trained DIR --test-parquet F --out DIR
  # against servers already running (keys in GRPOKIT_EVAL_BASE_KEY / GRPOKIT_EVAL_TRAINED_KEY):
  python launch/serve_eval.py --base-url http://h:p/v1 --base-name base --trained-url ... --trained-name ...

The command is :mod:`grpokit.evaluation.serve_compare` (the chained job's ``eval`` step runs the same
module; the defaults it reads from the run folder are described there).
"""

from __future__ import annotations

import sys

from grpokit.evaluation.serve_compare import main, parse_args, resolve, run

__all__ = ["entry", "main", "parse_args", "resolve", "run"]


def entry(argv: list[str] | None = None) -> int:
    """``grpokit serve-eval ...`` / ``python launch/serve_eval.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())

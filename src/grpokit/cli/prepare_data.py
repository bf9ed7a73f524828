"""Build a task's train/test parquet files in verl's row format.

python launch/prepare_data.py <task> --out data/<task> [the task's flags]   (README: each task's line)
python launch/prepare_data.py <task> --help

The tasks are those that bring a data builder (grpokit.config.task_registry: a task's ``data``
module has ``add_arguments(parser)`` and ``main(args)``). Every input row is checked first; a bad
one is named (file, line, field, fix) and nothing is written.
The files are written to a temporary folder beside --out and moved in only when both splits
succeeded, with a manifest.json (source, rows, sha256 of every file).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from grpokit.config.task_registry import tasks
from grpokit.tasks.prepared import DataError


def data_builders() -> dict[str, str]:
    """Task name -> the module that builds its parquet files, for every task that brings one."""
    return {name: task.data for name, task in tasks().items() if task.data}


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 written; 2 bad input or settings (one line per bad row on stderr, ``--out`` untouched)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="task", required=True)
    modules = {}
    for task, module_name in data_builders().items():
        module = importlib.import_module(module_name)
        modules[task] = module
        module.add_arguments(sub.add_parser(task, help=(module.__doc__ or "").strip().splitlines()[0]))
    args = parser.parse_args(argv)
    try:
        modules[args.task].main(args)
    except DataError as exc:
        print(
            f"prepare_data.py {args.task}: {len(exc.problems)} problem(s) in the input; "
            f"nothing was written to {args.out}\n{exc}",
            file=sys.stderr,
        )
        return 2
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"prepare_data.py {args.task}: {exc}; nothing was written to {args.out}", file=sys.stderr)
        return 2
    return 0


def entry(argv: list[str] | None = None) -> int:
    """``grpokit prepare-data ...`` / ``python launch/prepare_data.py ...``; returns the exit status."""
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())

"""Build a task's train/test parquet files in verl's row format.

python launch/prepare_data.py gsm8k --source openai/gsm8k --out data/gsm8k
python launch/prepare_data.py memalpha --source nlu:../shared/data/nlu --out data/memalpha
python launch/prepare_data.py tool_memory --out data/tool_memory --num-train 256 --num-test 32

Every input row is checked first; a bad one is named (file, line, field, fix) and nothing is written.
The files are written to a temporary folder beside --out and moved in only when both splits
succeeded, with a manifest.json (source, rows, sha256 of every file).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from grpokit.tasks.prepared import DataError

TASKS = {
    "gsm8k": "grpokit.tasks.gsm8k.data",
    "memalpha": "grpokit.tasks.memalpha.data",
    "tool_memory": "grpokit.tasks.tool_memory.data",
}


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 written; 2 bad input or settings (one line per bad row on stderr, ``--out`` untouched)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="task", required=True)
    modules = {}
    for task, module_name in TASKS.items():
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

"""Build a task's train/test parquet files in verl's row format.

python launch/prepare_data.py gsm8k --source openai/gsm8k --out data/gsm8k
python launch/prepare_data.py memalpha --source nlu:../shared/data/nlu --out data/memalpha
python launch/prepare_data.py tool_memory --out data/tool_memory --num-train 256 --num-test 32
"""

from __future__ import annotations

import argparse
import importlib
import logging

TASKS = {
    "gsm8k": "grpokit.tasks.gsm8k.data",
    "memalpha": "grpokit.tasks.memalpha.data",
    "tool_memory": "grpokit.tasks.tool_memory.data",
}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="task", required=True)
    modules = {}
    for task, module_name in TASKS.items():
        module = importlib.import_module(module_name)
        modules[task] = module
        module.add_arguments(sub.add_parser(task, help=(module.__doc__ or "").strip().splitlines()[0]))
    args = parser.parse_args()
    modules[args.task].main(args)


if __name__ == "__main__":
    main()

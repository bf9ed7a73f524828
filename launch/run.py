"""Run one point in this process: the body of ``sbatch slurm/train.sbatch`` and of a plain local run.

    python launch/run.py [kit overrides...]          # e.g. experiment=gsm8k_grpo model=tiny

Inside a Slurm job the run folder is ``<logs_root>/<experiment>_job<SLURM_JOB_ID>/000``, so a
requeued job comes back into the same folder; elsewhere it is named after the start time.
The point is validated exactly as the sweep validates it before anything runs.
"""

from __future__ import annotations

import os
import sys

from omegaconf import open_dict

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.runtime.driver import run_point
from grpokit.validate import validate_point


def main(argv: list[str]) -> int:
    overrides = list(argv)
    cfg = compose_kit(overrides)
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    if job and not any(o.startswith("sweep_name=") for o in overrides):
        with open_dict(cfg):
            cfg.sweep_name = f"{cfg.experiment.name}_job{os.environ['SLURM_JOB_ID']}"
    spec = build_point(cfg, index=0, kit_overrides=overrides, swept={})
    _, problems = validate_point(spec)
    if problems:
        print("\n".join(map(str, problems)), file=sys.stderr)
        return 2
    return run_point(spec)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run one point in this process: the body of ``slurm/train.sbatch`` and of a plain local run.

    python launch/run.py [kit overrides...]          # e.g. experiment=gsm8k_grpo model=tiny

Inside a Slurm job the run folder is ``<logs_root>/<experiment>_job<SLURM_JOB_ID>/000``, so a
requeued job comes back into the same folder; elsewhere it is named after the start time.
The point is validated exactly as the sweep validates it before anything runs. A single run is a
sweep of one point: its sweep folder gets a ``manifest.json`` (docs/run-folder.md), so
``status.py``, ``report.py`` and ``resubmit.py`` read it like any sweep.

Exit status: the driver's (0 completed, skipped_no_gpu or requeued; 1 failed); 2 when the point
does not validate or its sweep folder holds another sweep (nothing ran).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hydra.errors import HydraException
from omegaconf import open_dict
from omegaconf.errors import OmegaConfBaseException

from grpokit.config.compose import compose_kit
from grpokit.config.point import PointSpec, build_point
from grpokit.run_folder.manifest import MANIFEST, read_manifest, write_manifest
from grpokit.runtime.driver import run_point
from grpokit.slurm.task import JobEnv, slurm_task_id
from grpokit.validate import validate_point


def claim_sweep_folder(spec: PointSpec, experiment: str) -> str | None:
    """Write ``manifest.json`` of the one-point sweep holding ``spec`` (once: a requeued job or the
    same command again finds its own). Returns an error line when the folder holds another sweep."""
    sweep_dir = Path(spec.run_dir).parent
    path = sweep_dir / MANIFEST
    if path.exists():
        try:
            points = read_manifest(sweep_dir).points
        except ValueError as exc:  # ManifestError: one line naming the file and key
            return f"{exc}; nothing ran"
        if [Path(p.run_dir) for p in points] != [Path(spec.run_dir)]:
            return (
                f"{sweep_dir} already holds another sweep ({len(points)} point(s) in its manifest.json); "
                "nothing ran. Choose another sweep_name= (or leave it out)."
            )
        return None
    write_manifest(
        sweep_dir,
        [spec],
        [slurm_task_id()],  # the id status.py asks Slurm about
        experiment=experiment,
        cluster=spec.cluster.kind,
        swept_keys=[],
    )
    return None


def job_overrides(argv: list[str], environ) -> tuple[list[str], list[str]]:
    """The job's overrides: ``argv`` with ``verl_script=<file>`` turned into the script's settings, as the
    sweep command does (:func:`grpokit.config.verl_script.expand_argv`; ``sbatch slurm/train.sbatch
    verl_script=<file>`` reads it from the submit folder), and the lines that say what was read.
    Raises :class:`grpokit.config.verl_script.ScriptError` (one line) for a script it cannot read."""
    from grpokit.config.verl_script import expand_argv

    return expand_argv(list(argv), environ)


def main(argv: list[str]) -> int:
    from grpokit.config.verl_script import ScriptError

    try:
        overrides, said = job_overrides(argv, os.environ)
    except ScriptError as exc:
        print(f"run.py: {exc}", file=sys.stderr)
        return 2
    for line in said:
        print(line, file=sys.stderr)
    try:
        cfg = compose_kit(overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        print(f"run.py: {type(exc).__name__}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    job = JobEnv.from_env()
    if job.in_slurm and not any(o.startswith("sweep_name=") for o in overrides):
        with open_dict(cfg):
            cfg.sweep_name = f"{cfg.experiment.name}_job{job.job_id}"
    spec = build_point(cfg, index=0, kit_overrides=overrides, swept={})
    for notice in spec.notices:  # what the kit changed on its own (the file logger it always keeps)
        print(f"note: {notice}", file=sys.stderr)
    _, problems = validate_point(spec)
    if problems:
        print("\n".join(map(str, problems)), file=sys.stderr)
        return 2
    refused = claim_sweep_folder(spec, str(cfg.experiment.name))
    if refused:
        print(f"run.py: {refused}", file=sys.stderr)
        return 2
    return run_point(spec)


def entry(argv: list[str] | None = None) -> int:
    """``grpokit run ...`` / ``python launch/run.py ...``; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    if "--help" in args or "-h" in args:  # Hydra's grammar has no flags: the usage, not a parse error
        print("usage: grpokit run [group=option ...] [key=value ...]   (python launch/run.py ...)\n")
        print((__doc__ or "").strip())
        print("\nThe overrides are the sweep's (grpokit sweep --help lists groups and keys), one value each.")
        return 0
    return main(args)


if __name__ == "__main__":
    sys.exit(entry())

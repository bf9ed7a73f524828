"""TEST DOUBLE of slurmctld forgetting jobs (MinJobAge passed, no accounting): wraps ``squeue`` and
``scontrol`` so that the jobs named in ``GRPOKIT_FORGOTTEN_JOBS`` (comma-separated: display ids
like ``51_0`` and raw ids like ``52``) are missing from their answers, as a purged job is. Every
other call and line is the real command's. Used by tests/integration/test_liveness_slurm.py:
changing the real cluster's MinJobAge would purge the other tests' jobs too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)


def main() -> int:
    name, args = Path(sys.argv[1]).name, sys.argv[2:]
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != Path(HERE)
    )
    real = shutil.which(name, path=path)
    if real is None:
        print(f"{name}: not found", file=sys.stderr)
        return 127
    out = subprocess.run([real, *args], capture_output=True, text=True)
    forgotten = [j for j in os.environ.get("GRPOKIT_FORGOTTEN_JOBS", "").split(",") if j]

    def known(line: str) -> bool:
        for job in forgotten:
            array, _, task = job.partition("_")
            if line.startswith(f"{job}|") or f"JobId={job} " in line:
                return False
            if task and f"ArrayJobId={array} ArrayTaskId={task} " in line:
                return False
        return True

    lines = [ln for ln in out.stdout.splitlines(keepends=True) if known(ln)]
    sys.stdout.write("".join(lines))
    sys.stderr.write(out.stderr)
    if name == "squeue" and forgotten and not lines and "-j" in args:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())

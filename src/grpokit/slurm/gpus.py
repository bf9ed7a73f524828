"""The GPUs this process may use (the one reader of ``CUDA_VISIBLE_DEVICES`` for the kit) and what
``nvidia-smi`` says of this node's GPUs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from grpokit.slurm import runner


def visible_gpus(*, probe: bool = False) -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` as Slurm (or the user) set it.

    When it is unset: with ``probe`` the machine's GPUs (``nvidia-smi -L``, ids ``"0"``,
    ``"1"``, ...; [] without nvidia-smi), else [] (the caller decides, e.g. the driver numbers
    the GPUs it planned). A set but empty value means no GPU ([]).
    """
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return [v.strip() for v in value.split(",") if v.strip()]
    if not probe or shutil.which("nvidia-smi") is None:
        return []
    try:
        res = runner.run(["nvidia-smi", "-L"], timeout_s=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(res.stdout.splitlines()) if line.startswith("GPU ")]


def cuda_available() -> bool:
    """Whether a real CUDA GPU is present (``nvidia-smi -L`` names one; without nvidia-smi, the
    driver's ``/proc/driver/nvidia/gpus``). Slurm's gres may schedule devices that are not GPUs."""
    if shutil.which("nvidia-smi"):
        try:
            out = runner.run(["nvidia-smi", "-L"], timeout_s=30)
            return out.returncode == 0 and "GPU" in out.stdout
        except (OSError, subprocess.TimeoutExpired):
            return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def compute_capability() -> str | None:
    """The first visible GPU's compute capability (``"9.0"``) from ``nvidia-smi``, without
    creating a CUDA context in this process; None when there is no GPU or no answer in 10 s."""
    try:
        out = runner.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], timeout_s=10, check=True
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None

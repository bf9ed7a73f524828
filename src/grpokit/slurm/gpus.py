"""The GPUs this process may use: the one reader of ``CUDA_VISIBLE_DEVICES`` for the kit."""

from __future__ import annotations

import os
import shutil
import subprocess


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
        res = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(res.stdout.splitlines()) if line.startswith("GPU ")]

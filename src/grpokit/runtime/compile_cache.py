"""Compile and graph caches kept with the point's checkpoints, so a later attempt reuses them.

vLLM (``torch.compile`` artefacts and CUDA-graph sizes, ``VLLM_CACHE_ROOT``), TorchInductor
(``TORCHINDUCTOR_CACHE_DIR``) and Triton (``TRITON_CACHE_DIR``: the Gated-DeltaNet, fused-logits and
flash-linear-attention kernels) write their caches under ``$HOME`` or ``/tmp`` by default: on a
cluster that is the node's local disk, so a requeued or resubmitted attempt, usually on another
node, compiles everything again. Under ``<checkpoint_dir>/.compile_cache/`` they travel with the
point's checkpoints (shared storage: the kit checks the checkpoint folder is shared).

The caches are keyed by their tools on code, shapes and versions; a stale entry is not used.

verl 0.9.1 sets ``VLLM_DISABLE_COMPILE_CACHE=1`` for every Ray worker unless the variable is
already set (``verl/trainer/constants_ppo.py``, a work-around for vllm-project/vllm#31199: torch
before 2.10 could leave a torn Inductor artefact when engines wrote one cache at once). With it
vLLM neither reads nor writes its ``torch.compile`` cache and Inductor's caches are forced off, so
the folders above never hit. torch 2.10+ writes those artefacts atomically (pytorch/pytorch#162432),
and each point has its own cache folder, so the kit sets it to ``0`` (:data:`ENABLE_VARS`); a
user's own value wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

CACHE_DIRNAME = ".compile_cache"
# environment variable -> sub-folder of <checkpoint_dir>/.compile_cache
CACHE_VARS = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
}


#: variables the kit sets (unless already set) so that the caches above are used at all
ENABLE_VARS = {"VLLM_DISABLE_COMPILE_CACHE": "0"}


def environment(checkpoint_dir: str | Path, current: Mapping[str, str]) -> dict[str, str]:
    """The cache variables of :data:`CACHE_VARS` pointing under ``<checkpoint_dir>/.compile_cache``.

    Variables already set in `current` (the job's environment, e.g. ``os.environ``) are left out:
    a user's own cache location wins. The folders are created (mode from the umask). Adds
    :data:`ENABLE_VARS` (vLLM's compile cache on) unless set in `current`.
    """
    root = Path(checkpoint_dir) / CACHE_DIRNAME
    env: dict[str, str] = {}
    for var, sub in CACHE_VARS.items():
        if current.get(var):
            continue
        path = root / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    env.update({k: v for k, v in ENABLE_VARS.items() if current.get(k) is None})
    return env

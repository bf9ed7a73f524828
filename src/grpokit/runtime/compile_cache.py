"""Compile and graph caches kept with the point's checkpoints, so a later attempt reuses them.

vLLM (``torch.compile`` artefacts and CUDA-graph sizes, ``VLLM_CACHE_ROOT``), TorchInductor
(``TORCHINDUCTOR_CACHE_DIR``) and Triton (``TRITON_CACHE_DIR``: the Gated-DeltaNet, fused-logits and
flash-linear-attention kernels) write their caches under ``$HOME`` or ``/tmp`` by default: on a
cluster that is the node's local disk, so a requeued or resubmitted attempt, usually on another
node, compiles everything again. Under ``<checkpoint_dir>/.compile_cache/`` they travel with the
point's checkpoints (shared storage: the kit checks the checkpoint folder is shared).

The caches are keyed by their tools on code, shapes and versions; a stale entry is not used.
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


def environment(checkpoint_dir: str | Path, current: Mapping[str, str]) -> dict[str, str]:
    """The cache variables of :data:`CACHE_VARS` pointing under ``<checkpoint_dir>/.compile_cache``.

    Variables already set in `current` (the job's environment, e.g. ``os.environ``) are left out:
    a user's own cache location wins. The folders are created (mode from the umask).
    """
    root = Path(checkpoint_dir) / CACHE_DIRNAME
    env: dict[str, str] = {}
    for var, sub in CACHE_VARS.items():
        if current.get(var):
            continue
        path = root / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    return env

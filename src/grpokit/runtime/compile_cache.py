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

**Seeded from a sibling point.** The caches do not depend on the point's learning settings, and a
first attempt spends most of its engine start compiling (measured on one H200, full Qwen3.5-0.8B
shape, docs/performance.md: 48.9 s of Triton JIT for the Gated-DeltaNet kernels and 22.2 s of
``torch.compile``, against 2.5 s when the cache hit). So a point whose cache folder is empty starts
from a copy of a sibling's (:func:`seed`): a point of the same sweep that logged its first step and
then wrote :data:`COMPLETE` (:func:`mark_complete`: every cache file and its size at that moment).
Only the listed files, at their listed sizes, are copied; each point still writes only its own
folder, so no two engines ever write one cache. Triton's group files name their kernels by absolute
path: the copy names the copy's. Whatever the copy leaves out is compiled and cached as before
(vLLM keys its compile cache on the model, parallelism and CUDA-graph sizes: a sibling with another
``max_num_seqs`` gives the Triton kernels but not the graph).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from grpokit.run_folder.atomic import now, write_json_atomic

log = logging.getLogger(__name__)

CACHE_DIRNAME = ".compile_cache"
#: written in a cache folder once its point logged a step: ``{"root": str, "written": iso8601,
#: "files": {relative path: size in bytes}}``
COMPLETE = "COMPLETE.json"
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


def mark_complete(checkpoint_dir: str | Path) -> bool:
    """Write :data:`COMPLETE` in ``<checkpoint_dir>/.compile_cache`` (once): the files the caches hold
    now and their sizes, the list :func:`seed` copies. Call it after the attempt logged a step (the
    engine compiled, the first update's kernels ran). Returns whether it was written; an
    ``OSError`` (a full disk) is logged, not raised: the cache still serves its own point."""
    root = Path(checkpoint_dir) / CACHE_DIRNAME
    if not root.is_dir() or (root / COMPLETE).exists():
        return False
    try:
        files = {
            str(p.relative_to(root)): p.stat().st_size
            for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != COMPLETE and not p.name.endswith(".seed-tmp")
        }
        record = {"root": str(root), "written": now(), "files": files}
        write_json_atomic(root / COMPLETE, record)
    except OSError as exc:
        log.warning("could not list the compile caches of %s: %s", root, exc)
        return False
    return True


def seed(checkpoint_dir: str | Path, candidates: Iterable[Path]) -> str | None:
    """Copy a sibling point's complete cache into this point's cache folder when it holds no file yet.

    Args:
        checkpoint_dir: this point's checkpoint folder (``<checkpoint_dir>/.compile_cache`` is filled).
        candidates: other points' checkpoint folders (e.g. ``<sweep folder>/*/checkpoints``); those
            whose cache has :data:`COMPLETE` qualify, the newest is used; this point's own is skipped.

    Returns:
        The cache folder copied from, or None (this point has a cache of its own, no sibling has a
        complete one, or the copy failed: logged, and whatever was copied stays, each file whole).
    """
    own = Path(checkpoint_dir) / CACHE_DIRNAME
    if own.is_dir() and any(p.is_file() for p in own.rglob("*")):
        return None
    complete = []
    for folder in candidates:
        marker = Path(folder) / CACHE_DIRNAME / COMPLETE
        try:
            if marker.is_file() and marker.resolve().parent != own.resolve():
                complete.append((marker.stat().st_mtime, marker))
        except OSError:
            continue
    if not complete:
        return None
    marker = max(complete)[1]
    source = marker.parent.resolve()
    try:
        record = json.loads(marker.read_text())
        written_as = str(record.get("root") or source)
        copied = 0
        for rel, size in record["files"].items():
            src, dst = source / rel, own / rel
            if src.is_symlink() or not src.is_file() or src.stat().st_size != size or dst.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(dst.name + ".seed-tmp")
            if dst.name.startswith("__grp__") and dst.suffix == ".json":  # Triton: children by absolute path
                tmp.write_text(src.read_text().replace(written_as, str(own)))
            else:
                shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
            copied += 1
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        log.warning("could not seed the compile caches from %s: %s", source, exc)
        return None
    log.info("compile caches seeded from %s (%d files)", source, copied)
    return str(source)

"""What the resume-time checkpoint checks cost, at the reference run's full checkpoint shape.

    python bench/bench_checkpoint_check.py [--scale 1.0] [--dir /tmp] [--params 852985920] [--keep]

What it builds: one ``global_step_1`` as verl 0.9.1's FSDP save writes it at world size 1 (the
reference run: Qwen3.5-0.8B on one H200), with real ``torch.save`` files:

- ``actor/model_world_size_1_rank_0.pt``: params x 4 bytes. The actor's weights are saved in fp32:
  the measured run's config has ``actor_rollout_ref.actor.fsdp_config.model_dtype: fp32``
  (/work/shared/measurements/h200-full-shape-c9bf84e, trainer.log), bf16 only for compute
  (``mixed_precision.param_dtype``). 852,985,920 params (that folder's README) -> 3.41 GB.
- ``actor/optim_world_size_1_rank_0.pt``: Adam's ``exp_avg`` and ``exp_avg_sq`` in fp32, 2 x params x 4
  bytes -> 6.82 GB.
- ``actor/extra_state_world_size_1_rank_0.pt`` (lr scheduler and RNG), ``data.pt`` (dataloader
  state), ``actor/fsdp_config.json``, ``actor/huggingface/config.json``: small.

10.2 GB in all at ``--scale 1``. The measurement folder states no file sizes; these are the sizes
its config implies. The tensors are never filled (``torch.empty``: the zero page), so building it
needs disk, not memory. With less than twice the needed space free under ``--dir`` the scale is
lowered to fit and the line says so; GB/s is the figure to carry over. A small scale can fit in a
cache below the page cache (a VM's host): here ``--scale 0.02`` read cold at 2.2 GB/s, the full
shape at 0.88 GB/s; measure at the full shape where the disk allows.

What it times, each on the page cache dropped for the step's files (``fsync`` then
``posix_fadvise(DONTNEED)``: a requeued job on another node reads the files cold) and again warm:

- ``size`` : :func:`grpokit.runtime.decisions.checkpoints.inspect_checkpoint` with the size manifest
  (``.grpokit-sizes.json``, written by :func:`record_saved`): what every resume ran before the
  CRC check; stats and a directory listing, no file content.
- ``header``: the same without a manifest (zip directory / safetensors header of each file).
- ``read``: reading every ``*.pt`` byte once, nothing computed: the I/O floor of any content check.
- ``crc``: :func:`check_crcs`, the content check a resume now runs on the step it chooses.

Prints one line per check: seconds and GB/s, cold and warm.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from grpokit.runtime.decisions.checkpoints import MANIFEST, check_crcs, inspect_checkpoint, record_saved  # noqa: E402

#: Qwen3.5-0.8B as built by make_tiny_model.py --like qwen3.5-0.8b (the measured run's model).
PARAMS = 852_985_920
CHUNKS = 8  # tensors per file (a state dict has many; the cost is per byte, not per tensor)


def _save(path: Path, numel: int, dtype: torch.dtype, parts: int) -> None:
    each = max(1, numel // parts)
    state = {f"t{i}": torch.empty(each, dtype=dtype) for i in range(parts)}
    torch.save(state, path)


def build(root: Path, params: int) -> Path:
    """A world-size-1 ``global_step_1`` under ``root`` with files of the reference run's sizes (module docstring)."""
    step = root / "global_step_1"
    actor = step / "actor"
    (actor / "huggingface").mkdir(parents=True)
    _save(actor / "model_world_size_1_rank_0.pt", params, torch.float32, CHUNKS)
    _save(actor / "optim_world_size_1_rank_0.pt", 2 * params, torch.float32, 2 * CHUNKS)
    torch.save(
        {"lr_scheduler": {"last_epoch": 1}, "rng": torch.get_rng_state()}, actor / "extra_state_world_size_1_rank_0.pt"
    )
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": 1}))
    (actor / "huggingface" / "config.json").write_text("{}")
    torch.save({"step": 1}, step / "data.pt")
    (root / "latest_checkpointed_iteration.txt").write_text("1")
    return step


def drop_cache(step: Path) -> None:
    """Evict the step's files from the page cache (clean pages only: fsync first). No root needed."""
    for p in step.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def read_all(step: Path) -> None:
    buf = bytearray(16 << 20)
    for p in sorted(step.rglob("*.pt")):
        with open(p, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the full-shape sizes (default 1)")
    ap.add_argument("--params", type=int, default=PARAMS)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where to build the step (default: $TMPDIR or /tmp)")
    ap.add_argument("--keep", action="store_true", help="leave the files behind")
    args = ap.parse_args()

    params = int(args.params * args.scale)
    need = params * 12  # fp32 weights + two fp32 moments
    free = shutil.disk_usage(args.dir).free
    if 2 * need > free:
        scale = args.scale * free / (2 * need)
        print(f"only {free / 1e9:.1f} GB free under {args.dir}: scale {args.scale} -> {scale:.3f}")
        params = int(args.params * scale)
    root = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=args.dir))
    try:
        t = timed(lambda: build(root, params))
        step = root / "global_step_1"
        pts = sorted(step.rglob("*.pt"))
        gb = sum(p.stat().st_size for p in pts) / 1e9
        print(f"built {step}: {len(pts)} .pt files, {gb:.2f} GB ({params:,} params x 12 bytes) in {t:.1f} s")
        for p in pts:
            print(f"  {p.relative_to(step)}: {p.stat().st_size / 1e9:.3f} GB")

        def complete():
            assert inspect_checkpoint(step).complete

        def crc():
            assert not check_crcs(step).problems

        def row(name, fn):
            drop_cache(step)
            cold = timed(fn)
            return name, cold, timed(fn)

        rows = [row("header", complete)]  # no manifest yet: the zip directory of each file
        assert record_saved(root) == 1 and (step / MANIFEST).exists()  # as the driver does after the save
        rows += [row("size", complete), row("read", lambda: read_all(step)), row("crc", crc)]
        print(f"\n{'check':8} {'cold s':>9} {'cold GB/s':>10} {'warm s':>9} {'warm GB/s':>10}   ({gb:.2f} GB of .pt)")
        for name, cold, warm in rows:
            print(f"{name:8} {cold:9.3f} {gb / cold:10.2f} {warm:9.3f} {gb / warm:10.2f}")
        full = args.params * 12 / 1e9
        crc_cold = next(c for n, c, _ in rows if n == "crc")
        at_full = full * crc_cold / gb
        print(f"\nat the full shape ({full:.1f} GB), the CRC check at this disk's cold rate: {at_full:.1f} s")
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

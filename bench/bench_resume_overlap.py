"""What overlapping resume's CRC-32 check with Ray's start saves (``Driver.prepare``).

    python bench/bench_resume_overlap.py [--scale 1.0] [--dir /tmp] [--repeats 2]

Builds the reference run's ``global_step_1`` (``bench_checkpoint_check.build``: 10.24 GB of ``*.pt``
at ``--scale 1``), then, per repeat, with the step's page cache dropped before each check:

- ``crc``: :func:`grpokit.runtime.decisions.resume_from.prepare_resume` alone (its CRC-32 read);
- ``ray``: the job's real one-node Ray start alone (:func:`grpokit.runtime.processes.ray_cluster.start_cluster`,
  one CPU, no GPU, its own start slot), stopped again;
- ``overlapped``: the check on a thread while Ray starts, as the driver runs them, both joined.

Prints one line per repeat: the seconds of each, their sum (the driver before) and the overlap.
Needs the step's size free under ``--dir`` twice over; the folder is removed at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_checkpoint_check as steps  # noqa: E402

from grpokit.runtime.decisions.resume_from import prepare_resume  # noqa: E402
from grpokit.runtime.processes import ray_cluster  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the full-shape sizes (default 1)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where to build the step (default: $TMPDIR or /tmp)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-resume-overlap-", dir=args.dir))
    ray_cluster.START_LOCK = root / "ray-start.lock"  # its own start slot: no wait on other jobs' starts
    ckpt = root / "ckpt"
    try:
        step = steps.build(ckpt, int(steps.PARAMS * args.scale))
        gb = sum(p.stat().st_size for p in step.rglob("*.pt")) / 1e9
        print(f"step of {gb:.2f} GB under {root}", flush=True)

        def check() -> None:
            report = prepare_resume(ckpt)
            assert report["resume_step"] == 1 and not report["set_aside"], report

        def start_ray():
            env = {**os.environ, **ray_cluster.auth_env(root / "secrets")}
            return ray_cluster.start_cluster(
                log_dir=root / f"ray-{time.monotonic_ns()}",
                env=env,
                num_cpus=1,
                num_gpus=0,
                nodes=["thisnode"],
                multi_node_host=None,
                timeout_s=180,
                worker_ports=20,
            )

        for n in range(args.repeats):
            steps.drop_cache(step)
            crc = steps.timed(check)
            t = time.perf_counter()
            cluster = start_ray()
            ray = time.perf_counter() - t
            cluster.stop(5)
            steps.drop_cache(step)
            t = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                checking = pool.submit(check)
                cluster = start_ray()
                checking.result()
            both = time.perf_counter() - t
            cluster.stop(5)
            print(
                f"repeat {n}: crc {crc:.1f} s, ray {ray:.1f} s, one after the other {crc + ray:.1f} s, "
                f"overlapped {both:.1f} s (saved {crc + ray - both:.1f} s)",
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

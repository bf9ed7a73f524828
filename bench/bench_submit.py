"""Time to validate and submit a 27-point sweep: the kit vs a bare hydra-submitit-launcher app.

    python bench/bench_submit.py        # needs the local Slurm cluster (bash slurm/local_cluster.sh up)

Both sweep batch x n x response (3 x 3 x 3 points) and go to the same Slurm cluster. The kit composes
each point with verl's schema, runs verl's validate_config and its own checks, writes the manifest
and returns once the array is queued. The bare app submits the same 27 points without any check;
Hydra's submitit launcher then blocks until the jobs end (hydra#2479), so its time is taken when
its array appears in squeue. Both arrays are cancelled right away. Prints both times and the ratio.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "launch"))
AXES = [
    "verl.data.train_batch_size=8,16,32",
    "verl.actor_rollout_ref.rollout.n=2,4,8",
    "verl.data.max_response_length=256,512,1024",
]


def squeue_count(name: str) -> int:
    out = subprocess.run(["squeue", "-h", "-r", "-n", name, "-o", "%i"], capture_output=True, text=True)
    return len(out.stdout.split())


def kit_submit(tmp: Path, model: Path, data: Path) -> float:
    args = [
        "-m",
        "cluster=slurm",
        "model=tiny",
        f"model.path={model}",
        f"experiment.data_dir={data}",
        f"logs_root={tmp / 'logs'}",
        "sweep_name=bench_kit",
        "cluster.cpus_per_task=1",
        "cluster.mem_gb=1",
        "cluster.time_min=15",
        "cluster.signal_lead_s=60",
        "cluster.array_parallelism=1",
        "runtime.needs_gpu=false",
        *AXES,
    ]
    start = time.perf_counter()
    out = subprocess.run([sys.executable, str(REPO / "launch" / "sweep.py"), *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    subprocess.run(["scancel", "-n", "bench_kit"])
    if out.returncode != 0:
        raise SystemExit(f"kit sweep failed:\n{out.stderr[-3000:]}")
    return elapsed


def bare_submit(tmp: Path) -> float:
    args = [
        "-m",
        "batch=8,16,32",
        "n=2,4,8",
        "response=256,512,1024",
        f"hydra.sweep.dir={tmp / 'bare'}",
        "hydra.launcher.array_parallelism=1",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "bare_hydra_app" / "app.py"), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    while squeue_count("bare_bench") < 27:
        if proc.poll() is not None:
            raise SystemExit(f"bare app exited early:\n{proc.stderr.read()[-3000:]}")
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    proc.kill()
    subprocess.run(["scancel", "-n", "bare_bench"])
    return elapsed


def main() -> None:
    from grpokit.models import build_model
    from grpokit.tasks.gsm8k.data import build

    # cancelled jobs may still be writing their run folders while the folder is removed
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as d:
        tmp = Path(d)
        model = build_model(tmp / "tiny", like="tiny")
        data = tmp / "gsm8k"
        build(os.environ.get("GRPOKIT_GSM8K_SOURCE", str(REPO.parent / "shared" / "data" / "gsm8k")), data)
        bare = bare_submit(tmp)
        kit = kit_submit(tmp, model, data)
    print(f"{'':34s}{'seconds':>10s}")
    print(f"{'bare hydra-submitit (no checks)':34s}{bare:10.1f}")
    print(f"{'grpokit (validate + submit)':34s}{kit:10.1f}")
    print(f"ratio kit / bare: {kit / bare:.2f}x for 27 points ({(kit - bare) / 27:.2f} s of checks per point)")


if __name__ == "__main__":
    main()

"""Time to validate and submit sweeps: the kit vs a bare hydra-submitit-launcher app, and 1000 points.

    python bench/bench_submit.py        # needs the local Slurm cluster (bash slurm/local_cluster.sh up)

In one run, so that both see the same machine load:

1. 27 points (batch x n x response, 3 x 3 x 3) through a bare Hydra app with hydra-submitit-launcher,
   no check: Hydra's submitit launcher blocks until the jobs end (hydra#2479), so its time is taken
   when its 27 tasks appear in squeue.
2. The same 27 points through the kit (``launch/sweep.py -m``): every point composed with verl's
   schema, verl's validate_config and the kit's checks, manifest, one array; it returns once queued.
   First with no verl verdict kept (a cache folder of the bench's own holding only verl's composed
   defaults: the first command of a sweep), then the same points again as another sweep, whose
   configs verl passed in the first (``grpokit.validate.verl_verdicts``: a dry run and then the
   real command, ``resume=true``, a sweep sent again), where the command does not import verl.
3. 1000 points (10 x 10 x 10) through the kit, validated and submitted to the same cluster as
   arrays of at most MaxArraySize tasks. They are submitted held (``sbatch --hold``, through
   ``cluster.additional_parameters``): a real submission that never takes a node of the shared
   cluster from anyone; the bench cancels them (its own arrays only, by job name) right after.

Every job is cancelled right away (by the bench's job names only). Prints each time, the 27-point
ratios kit / bare (target <= 2x), and the 1000-point time with its marginal cost per point
((t1000 - t27) / 973; targets < 60 s and <= 50 ms).
"""

from __future__ import annotations

import os
import resource
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
AXES_1000 = [
    "verl.data.train_batch_size=" + ",".join(str(8 * i) for i in range(1, 11)),
    "verl.actor_rollout_ref.rollout.n=" + ",".join(str(i) for i in range(1, 11)),
    "verl.data.max_response_length=" + ",".join(str(64 * i) for i in range(1, 11)),
]


def squeue_count(name: str) -> int:
    out = subprocess.run(["squeue", "-h", "-r", "-n", name, "-o", "%i"], capture_output=True, text=True)
    return len(out.stdout.split())


def kit_submit(tmp: Path, model: Path, data: Path, axes: list[str], name: str, extra: list[str], env: dict) -> float:
    args = [
        "-m",
        "cluster=slurm_local",
        "model=tiny",
        f"model.path={model}",
        f"experiment.data_dir={data}",
        f"logs_root={tmp / 'logs'}",
        f"sweep_name={name}",
        "cluster.cpus_per_task=1",
        "cluster.mem_gb=1",
        "cluster.timeout_min=15",
        "cluster.signal_delay_s=60",
        "cluster.array_parallelism=1",
        "runtime.needs_gpu=false",
        # the kit refuses a point whose data runs out before its last step: 1024 prompts
        # (train_max_samples) at batch 80 give 12 steps an epoch, 4 epochs cover the 48 steps
        "verl.trainer.total_epochs=4",
        *extra,
        *axes,
    ]
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, str(REPO / "launch" / "sweep.py"), *args], capture_output=True, text=True, env=env
    )
    elapsed = time.perf_counter() - start
    subprocess.run(["scancel", "-n", name])
    if out.returncode != 0:
        raise SystemExit(f"kit sweep {name} failed:\n{out.stderr[-3000:]}")
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
    proc.wait()  # its CPU time counts in the children's (cpu_seconds)
    subprocess.run(["scancel", "-n", "bare_bench"])
    return elapsed


def cpu_seconds() -> float:
    """User + system CPU seconds of the bench's finished children: less sensitive to a loaded machine than wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cache_without_verdicts(tmp: Path) -> dict:
    """The environment of a kit command whose cache folder holds verl's composed defaults, declared
    types, registered names and legacy-key table (each kept once per installed verl) and no verdict."""
    import shutil

    from grpokit.config.verl_schema import cache_dir, verl_base

    verl_base()  # composed (or read) once, as any earlier command would have left it
    cache = tmp / "cache"
    cache.mkdir()
    from grpokit.config.verl_legacy import table
    from grpokit.config.verl_types import declared
    from grpokit.validate.verl_registries import registries

    declared(), registries(), table()  # verl's declared types, registered names, legacy keys: per install
    for kept in ("verl_defaults-*.pickle", "verl_types-*.json", "verl_registries-*.json", "verl_legacy-*.json"):
        for file in cache_dir().glob(kept):
            shutil.copy(file, cache)
    return {**os.environ, "GRPOKIT_CACHE_DIR": str(cache)}


def main() -> None:
    from grpokit.models import build_model
    from grpokit.tasks.gsm8k.data import build

    # cancelled jobs may still be writing their run folders while the folder is removed
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as d:
        tmp = Path(d)
        model = build_model(tmp / "tiny", like="tiny")
        data = tmp / "gsm8k"
        build(os.environ.get("GRPOKIT_GSM8K_SOURCE", str(REPO.parent / "shared" / "data" / "gsm8k")), data)
        env = cache_without_verdicts(tmp)
        print(f"load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        print(f"{'':40s}{'wall s':>10s}{'CPU s':>10s}", flush=True)
        cpu = cpu_seconds()
        bare = bare_submit(tmp)
        cpu_bare, cpu = cpu_seconds() - cpu, cpu_seconds()
        print(f"{'27 points, bare hydra-submitit (no checks)':40s}{bare:10.1f}{cpu_bare:10.1f}", flush=True)
        kit = kit_submit(tmp, model, data, AXES, "bench_kit", [], env)
        cpu_kit, cpu = cpu_seconds() - cpu, cpu_seconds()
        print(f"{'27 points, grpokit (validate + submit)':40s}{kit:10.1f}{cpu_kit:10.1f}", flush=True)
        again = kit_submit(tmp, model, data, AXES, "bench_kit_again", [], env)
        cpu_again, cpu = cpu_seconds() - cpu, cpu_seconds()
        print(f"{'  the same 27 again, verl passed them':40s}{again:10.1f}{cpu_again:10.1f}", flush=True)
        # held: queued for real, never started on the shared cluster (see the module docstring)
        hold = ["+cluster.additional_parameters.hold=true"]
        kit1000 = kit_submit(tmp, model, data, AXES_1000, "bench_kit1000", hold, env)
        cpu_kit1000 = cpu_seconds() - cpu
        print(f"{'1000 points, grpokit (validate + submit)':40s}{kit1000:10.1f}{cpu_kit1000:10.1f}", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"ratio kit / bare, 27 points: {kit / bare:.2f}x wall, {cpu_kit / cpu_bare:.2f}x CPU (target <= 2x)")
    print(f"  the same points again: {again / bare:.2f}x wall, {cpu_again / cpu_bare:.2f}x CPU")
    marginal = (kit1000 - kit) / (1000 - 27)
    print(f"1000 points: {kit1000:.1f} s (< 60 s), {1000 * marginal:.0f} ms per point beyond 27 (target <= 50)")
    print(f"  CPU: {cpu_kit1000:.1f} s, {1000 * (cpu_kit1000 - cpu_kit) / (1000 - 27):.0f} ms per point beyond 27")


if __name__ == "__main__":
    main()

"""Start-up time of one job: the kit's driver vs verl's example Slurm recipe, side by side, on Slurm.

    python bench/bench_startup.py [--nodes 2] [--gpus-per-node 2] [--cpus 2] [--partition gpu]

Measures, for each, the seconds from the job's start (Slurm's ``StartTime``) to the moment a
trivial trainer is launched, and to the moment that trainer has joined Ray and sees every node:

- kit: one point through ``launch/sweep.py`` (Ray head + workers through ``srun --overlap``, port
  registry, token auth, readiness polled until every node and GPU registered); the driver's own
  ``timings.trainer_launched_s`` from ``status.json`` is printed too.
- verl: a re-creation of verl's ``examples/tutorial/slurm/ray_on_slurm.slurm`` start-up sequence
  (verl-project/verl): head IP from ``srun hostname --ip-address``; ``ray start --head`` on port
  6379 in the background; ``sleep 10``; per worker node ``ray start --address`` in the background
  and ``sleep 5``; then the trainer through ``srun --overlap``. Without the container.

Both launch the same trivial trainer (this file with ``--as-trainer``), which records when it
started and when ``ray.init`` saw all nodes. Under the kit it then logs its one step the way verl's
``file`` logger does (a ``{"step": 1, ...}`` line in ``VERL_FILE_LOGGER_PATH``): the point's target
is ``trainer.total_training_steps=1`` with no checkpoint (``save_freq=-1``), so the point is
``completed`` only because it reached its target (``grpokit.runtime.decisions.completion``). Needs the tiny
model and GSM8K parquet files, which it builds in a temporary folder (``../shared/data/gsm8k``).
Prints a table, the ratio verl / kit, and the kit attempt's start-up timeline (``startup.json``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grpokit.run_folder import FINAL_STATES, read_status

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GRPOKIT_SHARED", REPO.parent / "shared"))

VERL_RECIPE = """#!/bin/bash
# Re-creation of verl's examples/tutorial/slurm/ray_on_slurm.slurm start-up (no container).
echo "RECIPE_START $(date +%s.%N)"
mapfile -t nodes_array < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_node=${{nodes_array[0]}}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
port=6379
ip_head=$head_node_ip:$port
export ip_head
echo "IP Head: $ip_head"
echo "Starting HEAD at $head_node"
srun --nodes=1 --ntasks=1 -w "$head_node" \\
    {ray} start --head --node-ip-address="$head_node_ip" --port=$port \\
    --num-cpus "${{SLURM_CPUS_PER_TASK}}" --num-gpus "${{SLURM_GPUS_PER_NODE}}" --block &
sleep 10
worker_num=$((SLURM_JOB_NUM_NODES - 1))
for ((i = 1; i <= worker_num; i++)); do
    node_i=${{nodes_array[$i]}}
    echo "Starting WORKER $i at $node_i"
    srun --nodes=1 --ntasks=1 -w "$node_i" \\
        {ray} start --address "$ip_head" \\
        --num-cpus "${{SLURM_CPUS_PER_TASK}}" --num-gpus "${{SLURM_GPUS_PER_NODE}}" --block &
    sleep 5
done
RAY_ADDRESS=$ip_head PYTHONUNBUFFERED=1 srun --overlap --nodes=1 --ntasks=1 -w "$head_node" \\
    {python} {bench} --as-trainer --nodes "$SLURM_JOB_NUM_NODES"
"""


def as_trainer(argv: list[str]) -> int:
    """The trivial trainer: record the launch time, join Ray, wait until every node is alive."""
    launched = time.time()
    nodes = int(argv[argv.index("--nodes") + 1]) if "--nodes" in argv else int(os.environ.get("BENCH_NODES", 1))
    import ray

    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR")
    while len([n for n in ray.nodes() if n["Alive"]]) < nodes:
        time.sleep(0.1)
    ready = time.time()
    resources = ray.cluster_resources()
    ray.shutdown()
    Path(os.environ["BENCH_REPORT"]).write_text(
        json.dumps({"launched": launched, "ray_ready": ready, "resources": resources})
    )
    metrics = os.environ.get("VERL_FILE_LOGGER_PATH")  # set by the kit's driver, not by the recipe
    if metrics:
        Path(metrics).write_text(json.dumps({"step": 1, "data": {"bench/ray_ready_s": ready - launched}}) + "\n")
    return 0


def slurm_start(job_id: str) -> float:
    """The job's ``StartTime`` as a Unix time (1-second resolution, local time)."""
    out = subprocess.run(["scontrol", "show", "job", job_id, "-o"], capture_output=True, text=True, check=True)
    field = next(f for f in out.stdout.split() if f.startswith("StartTime="))
    return dt.datetime.fromisoformat(field.split("=", 1)[1]).timestamp()


def run_kit(args, work: Path, model: Path, data: Path) -> dict:
    report = work / "kit_report.json"
    overrides = [
        "-m",
        "model=tiny",
        f"model.path={model}",
        f"experiment.data_dir={data}",
        f"logs_root={work / 'logs'}",
        f"runtime.trainer_cmd=[python,{Path(__file__).resolve()},--as-trainer]",
        "runtime.needs_gpu=false",
        "verl.trainer.total_training_steps=1",  # the trivial trainer's one step is the target
        "verl.trainer.save_freq=-1",
        "cluster=slurm",
        f"cluster.nodes={args.nodes}",
        f"cluster.gpus_per_node={args.gpus_per_node}",
        f"cluster.cpus_per_task={args.cpus}",
        "cluster.mem_gb=1",
        "cluster.timeout_min=15",
        f"cluster.partition={args.partition}",
        "sweep_name=bench_kit",
    ]
    env = {**os.environ, "BENCH_REPORT": str(report), "BENCH_NODES": str(args.nodes)}
    out = subprocess.run(
        [sys.executable, str(REPO / "launch" / "sweep.py"), *overrides],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    if out.returncode != 0:
        raise SystemExit(f"kit sweep failed:\n{out.stderr[-3000:]}")
    point = json.loads((work / "logs" / "bench_kit" / "manifest.json").read_text())["points"][0]
    deadline = time.monotonic() + args.timeout
    while True:
        status = read_status(point["run_dir"])  # the kit's record (a missing file: pending)
        if status.state in FINAL_STATES:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"kit job not done after {args.timeout} s")
        time.sleep(1)
    if status.state != "completed":
        raise SystemExit(f"kit job {status.state}: {status.reason}")
    rep = json.loads(report.read_text())
    start = slurm_start(point["job_id"])
    from grpokit.run_folder import startup_view as startup  # not needed by the trivial trainer

    last = status.attempts[-1]
    attempt = Path(point["run_dir"]) / "attempts" / str(last.attempt)
    return {
        "timeline": startup.one_line(startup.read(attempt)),
        "launched_s": rep["launched"] - start,
        "ray_ready_s": rep["ray_ready"] - start,
        "driver_trainer_launched_s": (last.timings or {}).get("trainer_launched_s"),
        "gpus": rep["resources"].get("GPU"),
        "job": point["job_id"],
    }


def run_verl(args, work: Path) -> dict:
    report = work / "verl_report.json"
    script = work / "ray_on_slurm.slurm"
    ray = Path(sys.executable).with_name("ray")
    script.write_text(VERL_RECIPE.format(ray=ray, python=sys.executable, bench=Path(__file__).resolve()))
    env = {**os.environ, "BENCH_REPORT": str(report)}
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--wait",
            f"--nodes={args.nodes}",
            "--ntasks-per-node=1",
            f"--gpus-per-node={args.gpus_per_node}",
            f"--cpus-per-task={args.cpus}",
            "--mem=1G",
            "--time=15",
            f"--partition={args.partition}",
            f"--output={work}/verl_%j.out",
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=args.timeout,
    )
    job = out.stdout.strip().split(";")[0]
    if not report.exists():
        raise SystemExit(f"verl recipe job {job} wrote no report:\n{next(work.glob('verl_*.out')).read_text()[-3000:]}")
    rep = json.loads(report.read_text())
    start = slurm_start(job)
    return {
        "timeline": "",
        "launched_s": rep["launched"] - start,
        "ray_ready_s": rep["ray_ready"] - start,
        "driver_trainer_launched_s": None,
        "gpus": rep["resources"].get("GPU"),
        "job": job,
    }


def main() -> int:
    if "--as-trainer" in sys.argv:
        return as_trainer(sys.argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus-per-node", type=int, default=2)
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--partition", default="gpu")
    p.add_argument("--timeout", type=int, default=600)
    args = p.parse_args()
    sys.path.insert(0, str(REPO / "launch"))
    from grpokit.models import build_model
    from grpokit.tasks.gsm8k.data import build

    work = Path(tempfile.mkdtemp(prefix="bench_startup_"))
    model = build_model(work / "tiny", like="tiny", seed=0)
    build(str(SHARED / "data" / "gsm8k"), work / "gsm8k")
    kit = run_kit(args, work, model, work / "gsm8k")
    verl = run_verl(args, work)
    print(
        f"\nstart-up on Slurm, {args.nodes} node(s) x {args.gpus_per_node} GPU(s), seconds from job start "
        f"(Slurm StartTime, 1 s resolution)"
    )
    print(f"{'':34}{'kit':>10}{'verl recipe':>14}")
    print(f"{'trainer launched':34}{kit['launched_s']:>10.1f}{verl['launched_s']:>14.1f}")
    print(f"{'trainer joined Ray, all nodes':34}{kit['ray_ready_s']:>10.1f}{verl['ray_ready_s']:>14.1f}")
    print(f"{'driver: trainer_launched_s':34}{kit['driver_trainer_launched_s']:>10.1f}{'-':>14}")
    print(f"{'GPUs Ray sees':34}{kit['gpus']:>10.0f}{verl['gpus']:>14.0f}")
    print(
        f"ratio verl / kit, trainer launched: {verl['launched_s'] / kit['launched_s']:.2f}; "
        f"joined Ray: {verl['ray_ready_s'] / kit['ray_ready_s']:.2f}  (jobs {kit['job']}, {verl['job']}; {work})"
    )
    print(f"kit attempt's {kit['timeline'] or 'start-up timeline: none written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark ``launch/report.py``'s collection over a large synthetic sweep.

Usage: python bench/bench_report.py [--points 1000] [--steps 100] [--plots]
Writes a sweep folder per docs/run-folder.md into a temp dir (each point: status.json and two
attempts, the second re-running the last 10 steps), then times (a) the report's collection
(merge of attempts + summary table + CSV/Markdown) and (b) loading the same JSONL files with
plain pandas (``pd.read_json(lines=True)`` + ``pd.json_normalize``), and prints both and their ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from grpokit.reports.report_table import collect_report, write_tables
from grpokit.run_folder.sweep_reader import load_sweep

KEYS = [
    "critic/rewards/mean",
    "critic/score/mean",
    "critic/advantages/max",
    "critic/advantages/min",
    "response_length/mean",
    "response_length/max",
    "response_length/clip_ratio",
    "actor/pg_loss",
    "actor/kl_loss",
    "actor/entropy",
    "actor/grad_norm",
    "timing_s/step",
    "timing_s/gen",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/update_actor",
    "perf/total_num_tokens",
    "perf/throughput",
    "perf/time_per_step",
    "training/global_step",
]
ACC = "val-core/openai/gsm8k/acc/mean@1"


def write_sweep(root: Path, points: int, steps: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    sweep = root / "logs" / "bench"
    sweep.mkdir(parents=True)
    entries = []
    for i in range(points):
        run = sweep / f"{i:04d}_p{i}"
        split = max(1, steps - 10)
        for k, (first, last) in enumerate([(1, split + 5), (split + 1, steps)], start=1):
            folder = run / "attempts" / str(k)
            folder.mkdir(parents=True)
            with open(folder / "metrics.jsonl", "w") as f:
                for s in range(first, last + 1):
                    data = {key: rng.random() for key in KEYS}
                    if s % 10 == 0:
                        data[ACC] = rng.random()
                    f.write(json.dumps({"step": s, "data": data}) + "\n")
        status = {
            "state": "completed",
            "reason": "bench",
            "exit_code": 0,
            "target_step": steps,
            "last_step": steps,
            "slurm": {
                "job_id": None,
                "array_job_id": None,
                "array_task_id": None,
                "restart_count": 1,
                "nodelist": "n1",
                "gpus": 4,
            },
            "attempts": [
                {
                    "attempt": k,
                    "start": "2026-01-01T00:00:00+00:00",
                    "end": "2026-01-01T01:00:00+00:00",
                    "ended_by": e,
                    "slurm_state": "",
                    "exit_code": 0,
                    "first_step": 1,
                    "last_step": steps,
                    "elapsed_s": 3600.0,
                }
                for k, e in ((1, "preempted"), (2, "completed"))
            ],
            "updated": "2026-01-01T01:00:00+00:00",
        }
        (run / "status.json").write_text(json.dumps(status))
        entries.append(
            {
                "index": i,
                "name": run.name,
                "overrides": [f"x={i % 10}", f"y={i // 10 % 10}"],
                "swept": {"x": i % 10, "y": i // 10 % 10},
                "run_dir": str(run),
                "job_id": None,
                "array_job_id": None,
                "array_task_id": None,
                "submitted": None,
            }
        )
    manifest = {
        "sweep": "bench",
        "created": "2026-01-01T00:00:00+00:00",
        "experiment": "bench",
        "cluster": "none",
        "swept_keys": ["x", "y"],
        "points": entries,
    }
    (sweep / "manifest.json").write_text(json.dumps(manifest))
    return sweep


def plain_pandas(sweep: Path) -> int:
    """The baseline: every attempt file through pandas' own JSON-lines reader, data flattened."""
    rows = 0
    for path in sorted(sweep.glob("*/attempts/*/metrics.jsonl")):
        df = pd.read_json(path, lines=True)
        flat = pd.json_normalize(df["data"].tolist())
        flat.insert(0, "step", df["step"])
        rows += len(flat)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--plots", action="store_true", help="also time the PNG plots")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        t = time.perf_counter()
        sweep = write_sweep(Path(tmp), args.points, args.steps)
        print(f"wrote {args.points} points x {args.steps} steps (2 attempts each) in {time.perf_counter() - t:.1f} s")

        t = time.perf_counter()
        rows = plain_pandas(sweep)
        t_pandas = time.perf_counter() - t

        t = time.perf_counter()
        report = collect_report(load_sweep(sweep), ask_slurm=False)
        write_tables(report, Path(tmp) / "out")
        t_report = time.perf_counter() - t
        assert len(report.table) == args.points and (report.table["last_step"] == args.steps).all()
        print(f"plain pandas load of the JSONL files: {t_pandas:.2f} s ({rows} lines)")
        print(f"report (merge attempts + table + CSV/Markdown): {t_report:.2f} s")
        print(f"ratio report / plain pandas: {t_report / t_pandas:.2f}")
        if args.plots:
            from grpokit.reports.plots import plot_curves, plot_heatmap

            t = time.perf_counter()
            plot_curves(report, Path(tmp) / "out" / "curves.png")
            plot_heatmap(report, Path(tmp) / "out" / "heatmap.png", "x", "y")
            print(f"plots: {time.perf_counter() - t:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

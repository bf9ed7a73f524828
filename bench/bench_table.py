"""The table of bench/bench_h200.sh: per-step parts of each hardware profile side by side, their
ratio, the floor from the model's parameter count and the measured tokens, and the start-up.

    python bench/bench_table.py WORK_DIR --profiles h200 consumer_24gb

Reads WORK_DIR/logs/bench_<profile>/<point>/attempts/*/metrics.jsonl (verl's ``timing_s/*``,
``perf/*``, ``response_length/*`` and ``prompt_length/*``), status.json, and the bench's
start_<profile>.txt / first_step_<profile>.txt (epoch seconds: job start, first metrics line), and
gpu_mem.csv (epoch s, GPU index, MiB in use by all processes, every 2 s).
Floor of one step (issue 15): N language-model parameters, T tokens of the step; update 6NT and
two log-prob passes of 2NT each at PEAK_FLOPS; decode of the longest response, each token reading
the 2N bytes of bf16 weights at PEAK_BYTES.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grpokit.run_folder import startup_view as startup_timeline

N_LM = 752_393_024  # Qwen3.5-0.8B language model (src/grpokit/models/tiny.py)
PEAK_FLOPS = 790e12  # bf16 matrix rate measured on the GPU host (device notes, KINDS.md)
PEAK_BYTES = 4.3e12  # copy bandwidth measured there
PARTS = ("gen", "old_log_prob", "ref", "update_actor", "update_weights", "adv", "save_checkpoint", "step")


def _steps(point: Path) -> list[dict]:
    lines = []
    for path in sorted((point / "attempts").glob("*/metrics.jsonl"), key=lambda p: int(p.parent.name)):
        lines += path.read_text().splitlines()
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        rows.append({"step": row.get("step"), **row.get("data", {})})
    return rows


def _get(row: dict, *keys: str) -> float | None:
    for key in keys:
        if key in row:
            return float(row[key])
    return None


def _floor(row: dict, batch: int) -> float | None:
    prompt = _get(row, "prompt_length/mean")
    response = _get(row, "response_length/mean")
    longest = _get(row, "response_length/max")
    if prompt is None or response is None or longest is None:
        return None
    tokens = (prompt + response) * batch
    return (6 + 2 + 2) * N_LM * tokens / PEAK_FLOPS + longest * 2 * N_LM / PEAK_BYTES


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--profiles", nargs="+", default=["h200", "consumer_24gb"])
    parser.add_argument("--batch", type=int, default=64, help="sequences per step (batch 8 x n 8)")
    args = parser.parse_args()
    summary = {}
    for profile in args.profiles:
        points = sorted((args.work / "logs" / f"bench_{profile}").glob("0*"))
        point = points[0] if points else None
        rows = _steps(point) if point else []
        status = json.loads((point / "status.json").read_text()) if point and (point / "status.json").is_file() else {}
        start = args.work / f"start_{profile}.txt"
        first = args.work / f"first_step_{profile}.txt"
        startup = None
        if start.is_file() and first.is_file() and rows:
            step1 = _get(rows[0], "timing_s/step") or 0.0
            startup = float(first.read_text()) - step1 - float(start.read_text())
        summary[profile] = {"rows": rows, "status": status, "startup": startup}
        print(f"## hardware={profile}: state {status.get('state', '-')}, steps {len(rows)}")
        if status.get("reason"):
            print(f"reason: {status['reason'].splitlines()[0][:300]}")
        if not rows:
            continue
        print("| step | " + " | ".join(PARTS) + " | peak alloc GB | peak reserved GB | mfu | resp mean/max | floor s |")
        print("|" + "---|" * (len(PARTS) + 6))
        for row in rows:
            parts = [_get(row, f"timing_s/{p}") for p in PARTS]
            cells = ["-" if v is None else f"{v:.1f}" for v in parts]
            alloc = _get(row, "actor/perf/max_memory_allocated_gb", "perf/max_memory_allocated_gb")
            reserved = _get(row, "actor/perf/max_memory_reserved_gb", "perf/max_memory_reserved_gb")
            mfu = _get(row, "perf/mfu/actor", "actor/perf/mfu", "perf/mfu")
            resp = f"{_get(row, 'response_length/mean') or 0:.0f}/{_get(row, 'response_length/max') or 0:.0f}"
            floor = _floor(row, args.batch)
            print(
                f"| {row['step']} | "
                + " | ".join(cells)
                + f" | {alloc or 0:.1f} | {reserved or 0:.1f} | {mfu or 0:.3f} | {resp} | {floor or 0:.2f} |"
            )
        if startup is not None:
            print(f"start-up, job start -> step 1 start (first generation request, +-2 s): {startup:.0f} s")
        for attempt in status.get("attempts", []):
            print(f"driver timings: {attempt.get('timings')}, attempt wall {attempt.get('elapsed_s')} s")
            timeline = startup_timeline.read(point / "attempts" / str(attempt.get("attempt")))
            if timeline:
                print(f"attempt {attempt.get('attempt')} {startup_timeline.one_line(timeline)}")
                if timeline.get("engine"):
                    print(f"  vLLM's own figures: {timeline['engine']}")
    gpu_mem = args.work / "gpu_mem.csv"
    if gpu_mem.is_file():
        used = [int(f[2]) for f in (ln.split(",") for ln in gpu_mem.read_text().splitlines()) if len(f) == 3]
        if used:
            print(f"GPU memory in use, all processes, peak of 2-s samples: {max(used) / 1024:.1f} GiB")
    later = {
        p: [_get(r, "timing_s/step") for r in s["rows"][1:] if _get(r, "timing_s/step")] for p, s in summary.items()
    }
    if all(later.get(p) for p in ("h200", "consumer_24gb")):
        h, c = (sum(later[p]) / len(later[p]) for p in ("h200", "consumer_24gb"))
        print(
            f"s/step after step 1: h200 {h:.1f}, consumer_24gb {c:.1f}, ratio h200/consumer {h / c:.2f} (goal <= 0.3)"
        )
    if later.get("h200"):
        rows = summary["h200"]["rows"][1:]
        floors = [_floor(r, args.batch) for r in rows]
        pairs = [(_get(r, "timing_s/step"), f) for r, f in zip(rows, floors, strict=True) if f]
        if pairs:
            print("h200 step / floor: " + ", ".join(f"{s / f:.0f}x" for s, f in pairs) + " (goal <= 10x)")


if __name__ == "__main__":
    main()

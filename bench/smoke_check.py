"""Checks and the timing table of ``bench/gpu_smoke.sh``, read from the run folders only.

    python bench/smoke_check.py sweep SWEEP_DIR --points 2 --steps 2
    python bench/smoke_check.py wait-step METRICS_JSONL --step 1 --pid PID --timeout 900
    python bench/smoke_check.py requeued RUN_DIR
    python bench/smoke_check.py resumed RUN_DIR --steps 4
    python bench/smoke_check.py wait-final RUN_GLOB --timeout 1500
    python bench/smoke_check.py merged RUN_DIR
    python bench/smoke_check.py evaluated RUN_DIR
    python bench/smoke_check.py memalpha RUN_DIR --steps 2
    python bench/smoke_check.py tools SWEEP_DIR --steps 2 [--expect-tool-calls]
    python bench/smoke_check.py learned SWEEP_DIR --steps 20 [--window 5] [--margin 0.05]
    python bench/smoke_check.py report WORK_DIR [--json OUT]
    python bench/smoke_check.py table WORK_DIR [--phases "model data ..."]

Each check prints what it saw ("ok ...") and exits 1 naming the first file and key that disagree
with docs/run-folder.md. ``report`` prints the per-phase timings (driver, Ray, vLLM engine, each
step's parts from verl's ``timing_s/*`` metrics, checkpoint save) and the kit's own overhead.
``table`` prints the PASS/FAIL table of ``bench/gpu_smoke.sh`` from WORK_DIR/phases/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from grpokit.run_folder import FINAL_STATES
from grpokit.run_folder import read_status as read_status_record
from grpokit.run_folder.metrics import read_jsonl
from grpokit.runtime.decisions.checkpoints import list_checkpoints, read_tracker

log = logging.getLogger(__name__)


class CheckFailed(AssertionError):
    """A run folder disagrees with what the smoke test expects (the message names file and key)."""


def read_status(run: Path) -> dict:
    """``<run>/status.json`` read through its record (every key checked), as the file's JSON object."""
    return read_status_record(run).to_json()


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


def _steps(path: Path) -> list[int]:
    _expect(path.exists(), f"{path} missing")
    return [int(r["step"]) for r in read_jsonl(path)]


def _complete_step(run: Path, step: int) -> None:
    ckpt = run / "checkpoints"
    infos = {i.step: i for i in list_checkpoints(ckpt)}
    _expect(step in infos, f"{ckpt}/global_step_{step} missing (have {sorted(infos)})")
    _expect(infos[step].complete, f"{ckpt}/global_step_{step} incomplete: {infos[step].problems}")


def check_finished(run: Path, steps: int) -> dict[str, Any]:
    """status completed, merged metrics 1..steps once each, TensorBoard events, final checkpoint complete."""
    status = read_status(run)
    _expect(
        status.get("state") == "completed", f"{run}/status.json state={status.get('state')}: {status.get('reason')}"
    )
    got = _steps(run / "metrics.jsonl")
    _expect(got == list(range(1, steps + 1)), f"{run}/metrics.jsonl steps {got}, expected 1..{steps} once each")
    events = list((run / "attempts").glob("*/tensorboard/events.out.tfevents*"))
    _expect(bool(events), f"{run}/attempts/*/tensorboard has no events file")
    _complete_step(run, steps)
    _expect(read_tracker(run / "checkpoints") == steps, f"{run}/checkpoints tracker is not {steps}")
    return status


def cmd_sweep(args) -> None:
    sweep = Path(args.dir)
    manifest = json.loads((sweep / "manifest.json").read_text())
    points = manifest["points"]
    _expect(len(points) == args.points, f"{sweep}/manifest.json has {len(points)} points, expected {args.points}")
    for p in points:
        run = Path(p["run_dir"])
        status = check_finished(run, args.steps)
        print(
            f"ok {run.name}: {p['swept']} completed, steps 1..{args.steps}, global_step_{args.steps} complete, "
            f"attempt {status['attempts'][-1]['elapsed_s']} s"
        )


def cmd_wait_step(args) -> None:
    """Block until METRICS has a record with step >= --step; fail if --pid exits first."""
    path, deadline = Path(args.metrics), time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if path.exists():
            steps = [int(r["step"]) for r in read_jsonl(path)]
            if steps and max(steps) >= args.step:
                print(f"step {max(steps)} in {path}")
                return
        if args.pid and not Path(f"/proc/{args.pid}").exists():
            raise CheckFailed(f"process {args.pid} exited before step {args.step} appeared in {path}")
        time.sleep(0.5)
    raise CheckFailed(f"no step {args.step} in {path} after {args.timeout} s")


def cmd_requeued(args) -> None:
    run = Path(args.dir)
    status = read_status(run)
    _expect(status.get("state") == "requeued", f"{run}/status.json state={status.get('state')}: {status.get('reason')}")
    marker = run / "control" / "saved_for_requeue.json"
    _expect(marker.exists(), f"{marker} missing: the trainer did not checkpoint on the save request")
    saved = json.loads(marker.read_text())
    step = int(saved["step"])
    _expect(step >= 1, f"{marker} step={step}: nothing was saved")
    _complete_step(run, step)
    _expect(read_tracker(run / "checkpoints") == step, f"{run}/checkpoints tracker is not {step}")
    att = status["attempts"][-1]
    print(
        f"ok requeued: checkpoint global_step_{step} complete; attempt 1 ended_by={att.get('ended_by')} "
        f"last_step={att.get('last_step')} after {att.get('elapsed_s')} s; reason: {status.get('reason')}"
    )


def cmd_resumed(args) -> None:
    run = Path(args.dir)
    saved = (
        json.loads((run / "control" / "saved_for_requeue.json").read_text())
        if (run / "control" / "saved_for_requeue.json").exists()
        else None
    )
    status = check_finished(run, args.steps)
    attempts = status["attempts"]
    _expect(len(attempts) == 2, f"{run}/status.json has {len(attempts)} attempts, expected 2")
    resume = attempts[1].get("resume_step")
    _expect(resume is not None and resume >= 1, f"{run}/status.json attempts[1].resume_step={resume}")
    second = _steps(run / "attempts" / "2" / "metrics.jsonl")
    _expect(
        second and second[0] == resume + 1,
        f"{run}/attempts/2/metrics.jsonl starts at {second[:1]}, "
        f"expected step {resume + 1} (resumed from global_step_{resume})",
    )
    print(
        f"ok resumed: attempt 2 resumed from global_step_{resume} (steps {second}), merged steps 1..{args.steps} "
        f"once each; control marker now {saved}"
    )


def cmd_wait_final(args) -> None:
    """Block until the run folder matching RUN_GLOB has a final state; fail unless ``completed``."""
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        runs = sorted(Path(p) for p in glob.glob(args.run))
        status = read_status(runs[0]) if runs and (runs[0] / "status.json").exists() else {}
        if status.get("state") in FINAL_STATES:
            _expect(
                status["state"] == "completed",
                f"{runs[0]}/status.json state={status['state']}: {status.get('reason')}",
            )
            print(f"ok {runs[0]}: completed (last_step {status.get('last_step')})")
            return
        time.sleep(2)
    raise CheckFailed(f"no final state in {args.run}/status.json after {args.timeout} s")


def _metric_rows(run: Path) -> list[dict[str, Any]]:
    path = run / "metrics.jsonl"
    _expect(path.exists(), f"{path} missing")
    return read_jsonl(path)


def _keys_ending(rows: list[dict[str, Any]], suffix: str) -> dict[str, float]:
    """``{key: value}`` of the last record holding a key that ends with ``suffix``."""
    for r in reversed(rows):
        hits = {k: float(v) for k, v in r["data"].items() if k.endswith(suffix)}
        if hits:
            return hits
    return {}


def cmd_memalpha(args) -> None:
    """Completed run; the reward's memalpha_* keys in the metrics (validation: verl logs extra keys there)."""
    run = Path(args.dir)
    check_finished(run, args.steps)
    rows = _metric_rows(run)
    keys = sorted({k for r in rows for k in r["data"] if "memalpha" in k})
    _expect(bool(keys), f"{run}/metrics.jsonl has no memalpha_* key")
    last = {k: round(float(v), 4) for k, v in rows[-1]["data"].items() if "memalpha" in k}
    print(f"ok memalpha: completed {args.steps} steps, sidecars served; {len(keys)} memalpha keys, last {last}")


TOOL_PARTS = ("tool_reward", "answer_reward", "format_reward", "tool_calls")


def cmd_tools(args) -> None:
    """One completed tool_memory point: num_turns in the training metrics, the reward's parts and the
    tool-call count in the validation metrics; with --expect-tool-calls, tools actually ran."""
    sweep = Path(args.dir)
    points = json.loads((sweep / "manifest.json").read_text())["points"]
    _expect(len(points) == 1, f"{sweep}/manifest.json has {len(points)} points, expected 1")
    run = Path(points[0]["run_dir"])
    check_finished(run, args.steps)
    rows = _metric_rows(run)
    # verl 0.9.1 logs num_turns/mean (and training/num_turns/mean) for every training step
    turns = [r["data"].get("num_turns/mean", r["data"].get("training/num_turns/mean")) for r in rows]
    train_turns = [float(t) for t in turns if t is not None]
    _expect(
        len(train_turns) == args.steps,
        f"{run}/metrics.jsonl: num_turns/mean in {len(train_turns)} of {args.steps} steps",
    )
    val = {part: _keys_ending(rows, f"/{part}/mean@1") for part in (*TOOL_PARTS, "reward")}
    for part, hits in val.items():
        _expect(bool(hits), f"{run}/metrics.jsonl has no validation key .../{part}/mean@1 (verl's val-aux/val-core)")
    val_turns = _keys_ending(rows, "val-aux/num_turns/mean")
    _expect(bool(val_turns), f"{run}/metrics.jsonl has no val-aux/num_turns/mean")
    calls = next(iter(val["tool_calls"].values()))
    tool_reward = next(iter(val["tool_reward"].values()))
    if args.expect_tool_calls:
        _expect(max(train_turns) > 2, f"{run}/metrics.jsonl num_turns/mean {train_turns}: no tool turn in training")
        _expect(calls > 0, f"{run}/metrics.jsonl tool_calls/mean@1 = {calls}: no tool ran in validation")
        _expect(tool_reward > 0, f"{run}/metrics.jsonl tool_reward/mean@1 = {tool_reward}: no tool paid")
    parts = {part: round(next(iter(h.values())), 3) for part, h in val.items()}
    print(
        f"ok tools {run.name}: completed {args.steps} steps; training num_turns/mean {train_turns}; "
        f"validation num_turns/mean {round(next(iter(val_turns.values())), 2)}, {parts}"
    )


SCORE_KEY = "critic/score/mean"  # verl's mean reward-function score of the step's rollouts


def learning(rows: list[dict[str, Any]], steps: int, window: int, margin: float) -> dict[str, float]:
    """The reward rose: the mean of ``critic/score/mean`` over the last ``window`` steps exceeds the
    first ``window`` steps' by at least ``margin``. rows: metrics records (``{"step", "data"}``) of
    steps 1..steps. Returns ``{"first", "last", "rise"}``; raises CheckFailed naming the key."""
    _expect(steps >= 2 * window, f"--steps {steps} is below 2 x --window {window}: the windows would overlap")
    by_step = {int(r["step"]): r["data"].get(SCORE_KEY) for r in rows}
    missing = [s for s in range(1, steps + 1) if by_step.get(s) is None]
    _expect(not missing, f"metrics.jsonl has no {SCORE_KEY} at step(s) {missing}")
    scores = [float(by_step[s]) for s in range(1, steps + 1)]
    first, last = sum(scores[:window]) / window, sum(scores[-window:]) / window
    _expect(
        last - first >= margin,
        f"{SCORE_KEY} did not rise: mean of steps 1..{window} {first:.4f}, of steps {steps - window + 1}..{steps} "
        f"{last:.4f} (+{last - first:.4f} < {margin}); per step {[round(x, 3) for x in scores]}",
    )
    return {"first": first, "last": last, "rise": last - first}


def cmd_learned(args) -> None:
    """One completed point whose reward rose (:func:`learning`); prints the curve and the lengths."""
    sweep = Path(args.dir)
    points = json.loads((sweep / "manifest.json").read_text())["points"]
    _expect(len(points) == 1, f"{sweep}/manifest.json has {len(points)} points, expected 1")
    run = Path(points[0]["run_dir"])
    check_finished(run, args.steps)
    rows = _metric_rows(run)
    got = learning(rows, args.steps, args.window, args.margin)
    lengths = [r["data"].get("response_length/mean") for r in rows]
    print(f"curve {SCORE_KEY}: {[round(float(r['data'][SCORE_KEY]), 3) for r in rows]}")
    print(
        f"ok learned {run.name}: {SCORE_KEY} steps 1..{args.window} {got['first']:.3f} -> steps "
        f"{args.steps - args.window + 1}..{args.steps} {got['last']:.3f} (+{got['rise']:.3f} >= {args.margin}); "
        f"response_length/mean {lengths[0]} -> {lengths[-1]}"
    )


def cmd_merged(args) -> None:
    hf = Path(args.dir) / "hf"
    _expect((hf / "config.json").exists(), f"{hf}/config.json missing")
    weights = list(hf.glob("*.safetensors"))
    _expect(bool(weights), f"{hf} has no *.safetensors")
    _expect(any(hf.glob("tokenizer*")), f"{hf} has no tokenizer files")
    print(f"ok merged: {hf} ({sum(w.stat().st_size for w in weights) / 1e6:.1f} MB of safetensors)")


def cmd_evaluated(args) -> None:
    path = Path(args.dir) / "eval" / "eval_summary.json"
    _expect(path.exists(), f"{path} missing")
    summary = json.loads(path.read_text())
    print(f"ok evaluated: {json.dumps(summary)[:400]}")


# -- report ----------------------------------------------------------------------------------------
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
STEP_KEYS = (
    "gen",
    "old_log_prob",
    "ref",
    "adv",
    "update_actor",
    "update_weights",
    "save_checkpoint",
    "testing",
    "step",
)


def _log_times(path: Path) -> list[tuple[float, str]]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        m = _LOG_TIME.match(line)
        if m:
            t = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((t, line[m.end() :]))
    return out


def attempt_report(run: Path, k: int) -> dict[str, Any]:
    """Timings of one attempt: driver phases, vLLM engine start, steps, and the kit's share."""
    adir = run / "attempts" / str(k)
    status = read_status(run)
    att = status["attempts"][k - 1] if len(status.get("attempts", [])) >= k else {}
    rec: dict[str, Any] = {
        "run": f"{run.parent.name}/{run.name}",
        "attempt": k,
        "ended_by": att.get("ended_by"),
        "elapsed_s": att.get("elapsed_s"),
        **(att.get("timings") or {}),
    }
    lines = _log_times(adir / "driver.log")
    trainer_log = adir / "trainer.log"
    if lines and trainer_log.exists():
        t_start, t_end = lines[0][0], lines[-1][0]
        launched = next((t for t, msg in lines if "trainer launched" in msg), None)
        ray_cmd = next((t for t, msg in lines if "ray head:" in msg), None)
        t_trainer_end = trainer_log.stat().st_mtime
        if launched is not None:
            trainer_s = max(t_trainer_end - launched, 0.0)
            driver_s = t_end - t_start
            rec["driver_wall_s"] = round(driver_s, 1)
            rec["trainer_s"] = round(trainer_s, 1)
            rec["before_ray_s"] = round((ray_cmd or launched) - t_start, 1)  # validation, run folder, resume
            rec["after_trainer_s"] = round(max(t_end - t_trainer_end, 0.0), 1)  # teardown, metrics merge
            # Ray and the sidecars start together; sidecars_ready_s counts from the same instant
            # and covers both: the servers' own start-up is theirs, not the kit's.
            services_s = max(float(rec.get("ray_ready_s") or 0.0), float(rec.get("sidecars_ready_s") or 0.0))
            kit_s = driver_s - trainer_s - services_s
            rec["kit_overhead_s"] = round(kit_s, 1)
            rec["kit_share"] = round(kit_s / driver_s, 4) if driver_s > 0 else None
    if trainer_log.exists():
        m = _ENGINE.findall(trainer_log.read_text(errors="replace"))
        if m:
            rec["vllm_engine_init_s"] = [float(x) for x in m]
    metrics = adir / "metrics.jsonl"
    if metrics.exists():
        rec["steps"] = [
            {
                "step": r["step"],
                **{
                    f"{k2}_s": round(float(r["data"][f"timing_s/{k2}"]), 2)
                    for k2 in STEP_KEYS
                    if f"timing_s/{k2}" in r["data"]
                },
            }
            for r in read_jsonl(metrics)
        ]
    return rec


def cmd_report(args) -> None:
    work = Path(args.dir)
    rows = []
    for status_path in sorted((work / "logs").glob("*/*/status.json")):
        run = status_path.parent
        for k in range(1, len(read_status(run).get("attempts", [])) + 1):
            rows.append(attempt_report(run, k))
    phases = []
    times = work / "phase_times.tsv"
    if times.exists():
        for line in times.read_text().splitlines():
            name, secs, rc = line.split("\t")
            phases.append({"phase": name, "wall_s": float(secs), "rc": int(rc)})
    evals = {}
    for p in (work / "logs").glob("*/*/eval/servers/*.log"):
        evals[p.stem] = _server_ready(p)
    out = {"phases": phases, "attempts": rows, "serve": evals}
    for ph in phases:
        print(f"phase {ph['phase']:<16} {ph['wall_s']:8.1f} s  rc {ph['rc']}")
    for r in rows:
        steps = r.pop("steps", [])
        print(json.dumps(r))
        for s in steps:
            print("   ", json.dumps(s))
        r["steps"] = steps
    if evals:
        print("serve:", json.dumps(evals))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


def cmd_table(args) -> None:
    """PASS/FAIL table of the phases recorded under WORK_DIR/phases (bench/gpu_smoke.sh)."""
    pdir = Path(args.dir) / "phases"
    names = args.phases.split() if args.phases else sorted(p.stem for p in pdir.glob("*.start"))
    lines = ["| phase | result | wall s | what was seen |", "|---|---|---|---|"]
    failed = 0
    for name in names:
        start, end = pdir / f"{name}.start", pdir / f"{name}.end"
        note = (pdir / f"{name}.note").read_text().strip() if (pdir / f"{name}.note").exists() else ""
        if end.exists():
            rc, wall = end.read_text().split()[:2]
            result = "PASS" if rc == "0" else "SKIPPED" if rc == "skip" else "FAIL"
            wall = f"{float(wall):.0f}"
        elif start.exists():
            result, wall = "RUNNING", f"{time.time() - float(start.read_text()):.0f}"
        else:
            result, wall = "NOT RUN", "-"
        failed += result in ("FAIL", "NOT RUN")
        lines.append(f"| {name} | {result} | {wall} | {note.replace('|', '/')[:300]} |")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    if failed:
        raise CheckFailed(f"{failed} phase(s) failed or did not run")


def _server_ready(path: Path) -> dict[str, Any]:
    """First and 'Application startup complete' times of a vLLM server log (seconds apart)."""
    text = path.read_text(errors="replace")
    m = _ENGINE.findall(text)
    return {"engine_init_s": [float(x) for x in m], "log_bytes": os.path.getsize(path)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("dir")
    s.add_argument("--points", type=int, required=True)
    s.add_argument("--steps", type=int, required=True)
    s = sub.add_parser("wait-step")
    s.add_argument("metrics")
    s.add_argument("--step", type=int, default=1)
    s.add_argument("--pid", type=int, default=None)
    s.add_argument("--timeout", type=float, default=900)
    for name in ("requeued", "merged", "evaluated"):
        sub.add_parser(name).add_argument("dir")
    s = sub.add_parser("wait-final")
    s.add_argument("run", help="run folder or glob (the first match is used)")
    s.add_argument("--timeout", type=float, default=1500)
    s = sub.add_parser("memalpha")
    s.add_argument("dir")
    s.add_argument("--steps", type=int, default=2)
    s = sub.add_parser("tools")
    s.add_argument("dir")
    s.add_argument("--steps", type=int, default=2)
    s.add_argument("--expect-tool-calls", action="store_true")
    s = sub.add_parser("learned")
    s.add_argument("dir")
    s.add_argument("--steps", type=int, default=20)
    s.add_argument("--window", type=int, default=5, help="steps averaged at each end (5)")
    s.add_argument("--margin", type=float, default=0.05, help="the rise the last window must show (0.05)")
    s = sub.add_parser("table")
    s.add_argument("dir")
    s.add_argument("--phases", default=None, help="phase names in table order (default: all recorded)")
    s.add_argument("--out", default=None)
    s = sub.add_parser("resumed")
    s.add_argument("dir")
    s.add_argument("--steps", type=int, required=True)
    s = sub.add_parser("report")
    s.add_argument("dir")
    s.add_argument("--json", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        {
            "sweep": cmd_sweep,
            "wait-step": cmd_wait_step,
            "requeued": cmd_requeued,
            "resumed": cmd_resumed,
            "merged": cmd_merged,
            "evaluated": cmd_evaluated,
            "wait-final": cmd_wait_final,
            "memalpha": cmd_memalpha,
            "tools": cmd_tools,
            "learned": cmd_learned,
            "table": cmd_table,
            "report": cmd_report,
        }[args.cmd](args)
    except CheckFailed as exc:
        print(f"CHECK FAILED ({args.cmd}): {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

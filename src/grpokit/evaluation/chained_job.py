"""The chained job of one point (``after=[merge,eval]``, submitted by :mod:`grpokit.submit.chain`).

    python -m grpokit.evaluation.chained_job <run folder> --steps merge,eval [--limit N] [--max-tokens N]
        [--server-command JSON]

It starts only once the point's job ended with exit 0 (``afterok``) and runs the kit's own commands:
``merge`` is :func:`grpokit.evaluation.model_merge.merge_run` (verl's model merger) on the latest complete
checkpoint into ``<run>/hf``; ``eval`` is ``grpokit serve-eval --run-dir <run>``
(:mod:`grpokit.evaluation.serve_compare`: base and merged model served by vLLM, scored on the point's
``data.val_files``) into ``<run>/eval/``. A ``hf/`` or ``eval/`` already there (an earlier chain,
before the point was resubmitted, or a hand-made merge)
is moved aside to ``hf.<time>`` / ``eval.<time>``, never overwritten.

``<run>/chain_status.json``, written atomically at each change::

    {"state": "running" | "completed" | "failed" | "skipped", "reason": str, "job_id": str | null,
     "steps": [str], "point_state": str, "started": iso8601, "ended": iso8601 | null,
     "rehearsal": true (only for a rehearse=true point: its accuracies are made up),
     "merge": {"step": int, "hf": path, "elapsed_s": float},
     "eval": {"n": int, "base": float, "trained": float, "delta": float, "summary": path,
              "elapsed_s": float}}

``skipped``: the point's job exited 0 without completing (``skipped_no_gpu``): nothing to merge.
Exit status: 0 for completed and skipped, 1 for failed (Slurm then records the job FAILED).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from grpokit.config.field_help import field_help
from grpokit.config.schema import ChainConf
from grpokit.run_folder import RunFolder, StatusFileError, now, read_status, write_json_atomic
from grpokit.slurm.task import JobEnv

log = logging.getLogger(__name__)


class _Stopped(Exception):
    """SIGTERM: Slurm's time limit or scancel."""


def aside(path: Path) -> Path | None:
    """Move an existing ``path`` to ``<path>.<YYYYmmdd-HHMMSS>`` (a free name); returns where, or None."""
    if not path.exists():
        return None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target, k = path.with_name(f"{path.name}.{stamp}"), 2
    while target.exists():
        target, k = path.with_name(f"{path.name}.{stamp}-{k}"), k + 1
    path.rename(target)
    return target


def _last_line(text: str) -> str:
    """The last non-empty line (a traceback's exception, a command's final error), stripped."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def failure_reason(step: str, exc: BaseException) -> str:
    """The chain's one-line reason for ``exc`` raised in ``step``: ``merge: merging <ckpt> failed: verl's
    model merger exited 1: <its exception> (whole output: <run>/merge.log)``, ``merge: CheckpointError:
    ...``; never empty (an exception without a message is named by its type)."""
    from grpokit.evaluation.model_merge import MergeError

    if isinstance(exc, MergeError):
        return f"{step}: {exc}"
    if isinstance(exc, subprocess.CalledProcessError):
        said = _last_line(exc.stderr or "")
        what = f"{step}: {exc.cmd[0] if exc.cmd else 'a command'} exited {exc.returncode}"
        return what + (f": {said}" if said else "")
    said = _last_line(str(exc))
    return f"{step}: {type(exc).__name__}" + (f": {said}" if said else "")


def run_chain(run_dir: Path, steps: list[str], eval_args: list[str]) -> dict[str, Any]:
    """Run ``steps`` for the point in ``run_dir``; returns the final ``chain_status.json`` record."""
    folder = RunFolder(run_dir)
    try:
        status = read_status(run_dir)
        point_state, why, rehearsal = status.state, None, bool(status.rehearsal)
    except StatusFileError as exc:  # the chain still says what happened, in chain_status.json
        point_state, why, rehearsal = None, str(exc), False
    record: dict[str, Any] = {
        "state": "running",
        "reason": f"running {','.join(steps)}",
        "job_id": JobEnv.from_env().job_id,
        "steps": steps,
        "point_state": point_state,
        "started": now(),
        "ended": None,
    }
    if rehearsal:  # rehearse=true: rehearsal weights merged, the rehearsal answer server's made-up answers scored
        record["rehearsal"] = True
    write_json_atomic(folder.chain_status, record)
    if point_state != "completed":
        reason = why or f"point ended {point_state}: nothing to merge"
        record.update(state="skipped", reason=reason, ended=now())
        write_json_atomic(folder.chain_status, record)
        return record
    step = "merge"
    try:
        if "merge" in steps:
            from grpokit.evaluation.model_merge import choose_checkpoint, merge_run

            for old in (folder.hf, folder.eval):
                moved = aside(old)
                if moved:
                    log.info("moved the earlier %s aside to %s", old.name, moved)
            t = time.monotonic()
            ckpt = choose_checkpoint(run_dir)
            merge_run(run_dir, ckpt.step)
            record["merge"] = {"step": ckpt.step, "hf": str(folder.hf), "elapsed_s": round(time.monotonic() - t, 1)}
            write_json_atomic(folder.chain_status, record)
        if "eval" in steps:
            step = "eval"
            t = time.monotonic()
            argv = [sys.executable, "-m", "grpokit.evaluation.serve_compare", "--run-dir", str(run_dir), *eval_args]
            done = subprocess.run(argv, stderr=subprocess.PIPE, text=True)
            sys.stderr.write(done.stderr)
            if done.returncode != 0:
                raise RuntimeError(f"grpokit serve-eval exited {done.returncode}: {_last_line(done.stderr)}")
            summary = json.loads(folder.eval_summary.read_text())
            base, trained = (summary["models"][m]["accuracy"] for m in ("base", "trained"))
            record["eval"] = {
                "n": summary["n"],
                "base": base,
                "trained": trained,
                "delta": trained - base,
                "summary": str(folder.eval_summary),
                "elapsed_s": round(time.monotonic() - t, 1),
            }
        record.update(state="completed", reason=f"{','.join(steps)} done", ended=now())
    except _Stopped:
        record.update(state="failed", reason=f"{step}: stopped by SIGTERM (time limit or scancel)", ended=now())
    except Exception as exc:  # every failure ends in chain_status.json, with the step and its cause
        record.update(state="failed", reason=failure_reason(step, exc), ended=now())
    write_json_atomic(folder.chain_status, record)
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--steps", default="merge,eval", help="comma-separated: merge, eval")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=ChainConf.max_tokens, help=field_help(ChainConf)["max_tokens"])
    p.add_argument("--server-command", default=None, help="JSON list (grpokit serve-eval --server-command)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def stop(signum, frame):
        raise _Stopped()

    signal.signal(signal.SIGTERM, stop)
    eval_args = ["--max-tokens", str(args.max_tokens)]
    if args.limit is not None:
        eval_args += ["--limit", str(args.limit)]
    if args.server_command:
        eval_args += ["--server-command", args.server_command]
    record = run_chain(args.run_dir, [s for s in args.steps.split(",") if s], eval_args)
    print(json.dumps(record, indent=2))
    return 0 if record["state"] in ("completed", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())

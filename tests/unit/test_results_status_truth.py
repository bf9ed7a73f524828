"""status.py / report.py tell the truth: the job's own final state wins over Slurm's COMPLETED,
GPU hours count only attempts that held GPUs for training, a reason column, ``--json``.

Sweep folders are written per docs/run-folder.md; Slurm's answer is a SlurmJobState as
``grpokit.slurm.job_states.job_states`` returns it (its parsing of the real commands is tested in
test_slurm_states.py; tests/integration/test_train_sbatch.py reads a real Slurm job).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from grpokit.reports import report_table, status_table
from grpokit.reports.report_table import collect_report
from grpokit.reports.status_table import collect_rows, render_table
from grpokit.reports.summary import gpu_hours
from grpokit.run_folder.point_state import point_state
from grpokit.run_folder.sweep_reader import load_sweep
from grpokit.slurm.job_states import SlurmJobState

REPO = Path(__file__).resolve().parents[2]

SKIPPED_REASON = (
    "no CUDA GPU on this node: Ray, the sidecars and verl's config check ran; training was skipped. "
    "The trainer command is in /x/verl_cmd.sh"
)


def attempt(k: int, ended_by: str | None, *, elapsed: float = 600.0, launched: bool | None = True) -> dict:
    a = {
        "attempt": k,
        "start": f"2026-01-01T00:{10 * k:02d}:00+00:00",
        "end": None if ended_by is None else f"2026-01-01T00:{10 * k + 5:02d}:00+00:00",
        "ended_by": ended_by,
        "elapsed_s": None if ended_by is None else elapsed,
    }
    if ended_by is not None and launched is not None:  # the driver records timings at the end of every attempt
        a["timings"] = {"ray_ready_s": 3.0, **({"trainer_launched_s": 9.0} if launched else {})}
    return a


def point_folder(
    sweep: Path, index: int, state: str, attempts: list[dict], *, job: str | None, reason: str = ""
) -> dict:
    run = sweep / f"{index:03d}"
    run.mkdir(parents=True)
    array_job, _, task = (job or "").partition("_")
    status = {
        "state": state,
        "reason": reason,
        "target_step": 4,
        "slurm": {
            "job_id": job and str(900 + index),
            "array_job_id": array_job or None,
            "array_task_id": int(task) if task else None,
            "gpus": 2,
        },
        "attempts": attempts,
    }
    (run / "status.json").write_text(json.dumps(status))
    return {"index": index, "name": f"{index:03d}", "run_dir": str(run), "swept": {}, "job_id": job}


@pytest.fixture
def sweep(tmp_path) -> Path:
    sweep = tmp_path / "logs" / "truth"
    points = [
        # Ran every stage but training on a node without a GPU; exit 0, so Slurm says COMPLETED.
        point_folder(
            sweep,
            0,
            "skipped_no_gpu",
            [attempt(1, "skipped_no_gpu", launched=False)],
            job="100_0",
            reason=SKIPPED_REASON,
        ),
        # Failed its verl check on the node before the trainer started, then trained and completed.
        point_folder(
            sweep, 1, "completed", [attempt(1, "invalid", launched=False), attempt(2, "completed")], job="100_1"
        ),
        # The trainer failed; the driver exited 1 (Slurm FAILED), reason on several lines.
        point_folder(
            sweep,
            2,
            "failed",
            [attempt(1, "failed")],
            job="100_2",
            reason="trainer exited with 1; last lines of trainer.log:\nTraceback ...\nOOM",
        ),
        # Slurm says COMPLETED, but the job never closed its attempt (nothing says it trained).
        point_folder(sweep, 3, "running", [attempt(1, None)], job="100_3"),
        # Resubmitted as 200_0 (cancelled before it started): its status.json is the old job's.
        point_folder(sweep, 4, "failed", [attempt(1, "failed")], job="100_4", reason="old failure"),
        # Still training (Slurm RUNNING).
        point_folder(sweep, 5, "running", [attempt(1, None)], job="100_5"),
        # Wrote completed and closed its attempt; Slurm still says RUNNING while it stops Ray and sidecars.
        point_folder(sweep, 6, "completed", [attempt(1, "completed")], job="100_6"),
    ]
    points[4]["job_id"] = "200_0"
    (sweep / "manifest.json").write_text(json.dumps({"sweep": "truth", "swept_keys": [], "points": points}))
    return sweep


SLURM = {
    "100_0": SlurmJobState("100_0", "COMPLETED", "scontrol"),
    "100_1": SlurmJobState("100_1", "COMPLETED", "scontrol"),
    "100_2": SlurmJobState("100_2", "FAILED", "scontrol", reason="NonZeroExitCode"),
    "100_3": SlurmJobState("100_3", "COMPLETED", "scontrol"),
    "200_0": SlurmJobState("200_0", "CANCELLED", "scontrol"),
    "100_5": SlurmJobState("100_5", "RUNNING", "squeue", elapsed_s=1800.0),
    "100_6": SlurmJobState("100_6", "RUNNING", "squeue", elapsed_s=600.0),
}


@pytest.fixture
def slurm(monkeypatch):
    answer = lambda ids: {j: SLURM[j] for j in ids if j in SLURM}  # noqa: E731
    monkeypatch.setattr(status_table, "job_states", answer)
    monkeypatch.setattr(report_table, "job_states", answer)


def test_the_jobs_own_final_state_wins_over_slurms(sweep, slurm):
    rows = {r.index: r for r in collect_rows(load_sweep(sweep))}
    assert rows[0].state == "skipped_no_gpu"  # not Slurm's COMPLETED
    assert rows[1].state == "completed"
    assert rows[2].state == "failed"
    assert rows[3].state == "unknown"
    assert rows[4].state == "cancelled"  # the new job's word, not the old status.json's
    assert rows[5].state == "running"
    assert rows[6].state == "completed"  # the outcome is written; the job is only releasing its nodes


def test_reason_column_is_the_first_line_of_the_jobs_reason(sweep, slurm):
    rows = {r.index: r for r in collect_rows(load_sweep(sweep))}
    assert rows[0].reason == SKIPPED_REASON
    # the row (and --json) keeps the whole reason; the table shows its first line (issue 25)
    assert rows[2].reason == "trainer exited with 1; last lines of trainer.log:\nTraceback ...\nOOM"
    assert rows[3].reason.startswith("Slurm says COMPLETED, but the job recorded running")
    assert rows[4].reason == "cancelled while pending"  # "old failure" belongs to the replaced job
    console = Console(width=250, record=True)
    console.print(render_table(load_sweep(sweep), list(rows.values())))
    text = console.export_text()
    assert "reason" in text and "skipped_no_gpu" in text and "trainer exited with 1; last lines" in text
    assert "Traceback" not in text


def test_gpu_hours_count_only_attempts_that_trained(sweep, slurm):
    s = load_sweep(sweep)
    hours = {p.index: gpu_hours(p, SLURM.get(p.job_id)) for p in s.points}
    assert hours[0] == 0.0  # skipped training
    assert hours[1] == pytest.approx(600 * 2 / 3600)  # attempt 1 failed before the trainer started
    assert hours[2] == pytest.approx(600 * 2 / 3600)
    assert hours[5] == pytest.approx(1800 * 2 / 3600)  # running: Slurm's run time
    table = collect_report(s).table.set_index("index")
    assert table.loc[0, "gpu_hours"] == 0.0 and table.loc[0, "state"] == "skipped_no_gpu"
    assert table.loc[0, "reason"] == SKIPPED_REASON
    assert table.loc[1, "gpu_hours"] == pytest.approx(1 / 3)


def test_an_attempt_killed_without_timings_still_counts(sweep):
    p = load_sweep(sweep).points[2]
    p.status = p.status.with_fields(attempts=[attempt(1, "killed", launched=None), attempt(2, "failed")])
    assert p.status.attempts[0].timings is None
    assert gpu_hours(p) == pytest.approx(2 * 600 * 2 / 3600)


def test_without_slurm_the_status_file_decides(sweep):
    s = load_sweep(sweep)
    states = {p.index: point_state(p, None) for p in s.points}
    assert states[0] == "skipped_no_gpu" and states[1] == "completed" and states[2] == "failed"
    # A local run (no job id) stopped with a checkpoint is not queued: nothing requeues it.
    p = s.points[2]
    p.job_id = None
    p.status = p.status.with_fields(state="requeued")
    p.status = p.status.with_last_attempt(p.status.attempts[-1].with_fields(ended_by="preempted"))
    assert point_state(p, None) == "preempted"


def load_cli(name: str):
    """The command's module (grpokit.cli), as ``grpokit <command>`` runs it."""
    return importlib.import_module(f"grpokit.cli.{name}")


def test_status_json_output(sweep, slurm, capsys):
    status = load_cli("status")
    assert status.main([str(sweep), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["state"] for r in rows] == [
        "skipped_no_gpu",
        "completed",
        "failed",
        "unknown",
        "cancelled",
        "running",
        "completed",
    ]
    assert rows[0]["reason"] == SKIPPED_REASON and rows[0]["job_id"] == "100_0"
    assert rows[0]["last_reward"] is None  # NaN becomes null
    assert set(rows[0]) == {
        "index",
        "name",
        "swept",
        "job_id",
        "state",
        "reason",
        "attempts",
        "step",
        "target_step",
        "last_reward",
        "val_acc",
        "elapsed_s",
        "eta_s",
        "startup_s",
        "startup",
        "rehearsal",  # rehearse=true (issue 25)
    }
    assert rows[0]["startup_s"] is None and rows[0]["startup"] is None  # no startup.json written
    assert not math.isnan(rows[5]["elapsed_s"])


def test_status_json_on_a_missing_folder(tmp_path, capsys):
    status = load_cli("status")
    assert status.main([str(tmp_path), "--json"]) == 2  # a folder, but not a sweep's
    assert "manifest.json not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:  # neither a folder nor a sweep's name: argparse's error
        status.main([str(tmp_path / "nope"), "--json"])
    assert exit.value.code == 2 and "no sweep folder" in capsys.readouterr().err

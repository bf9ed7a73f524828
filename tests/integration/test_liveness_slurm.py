"""Liveness the kit can prove, on the local Slurm cluster (issue 24 items 1 and 2; issue 36 item 1:
a point once shown final stays final, with the same reason, after Slurm forgets its job).

Real: Hydra, submitit, Slurm, Ray, the driver, status.py, resubmit.py, ``wait_for``. TEST DOUBLES:
the trainer (tests/doubles/fake_verl_trainer.py) and, for "slurmctld forgot the job" only,
tests/doubles/slurm_forgets/ (``squeue``/``scontrol`` without the named jobs, as after MinJobAge:
the real cluster's MinJobAge is shared with every other test's jobs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

FORGETS = Path(__file__).resolve().parents[1] / "doubles" / "slurm_forgets"


def await_(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} after {timeout} s")
        time.sleep(every)


def sweep(kit, tmp_path: Path, name: str, overrides: list[str], env: dict | None = None) -> tuple[Path, Path, str]:
    out = kit.run("sweep.py", ["-m", *kit.slurm_cluster, *overrides, f"sweep_name={name}"], env=env, timeout=240)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    sweep_dir = Path([a.split("=", 1)[1] for a in overrides if a.startswith("logs_root=")][-1]) / name
    (point,) = kit.manifest(sweep_dir)["points"]
    return sweep_dir, Path(point["run_dir"]), point["job_id"]


def last_step(run_dir: Path, attempt: int = 1) -> int:
    path = run_dir / "attempts" / str(attempt) / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return max([json.loads(x)["step"] for x in lines if x.strip()] or [0])


def slurm_ended(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "--states=all", "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip() not in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING")


@pytest.mark.timeout(480)
def test_a_killed_driver_whose_job_slurm_forgot_is_final_resubmittable_and_waited_for(
    kit, slurm, kit_overrides, tmp_path, monkeypatch
):
    t0 = time.monotonic()
    overrides = [*kit_overrides, "verl.trainer.total_training_steps=16", "runtime.heartbeat_s=1"]
    env = {"FAKE_TRAINER_STEP_S": "0.5"}
    sweep_dir, run_dir, job_id = sweep(kit, tmp_path, "killed", overrides, env)

    # the driver (its pid in heartbeat.json) is killed with SIGKILL mid-run, as the OOM killer would
    await_("at step 5", lambda: (run_dir / "heartbeat.json").exists() and last_step(run_dir) >= 5, 240)
    record = json.loads((run_dir / "heartbeat.json").read_text())
    assert record["attempt"] == 1 and record["job_id"] == job_id and record["beat_s"] == 1.0
    os.kill(record["pid"], signal.SIGKILL)
    await_("ended in Slurm", lambda: slurm_ended(job_id), 120)
    killed_at = last_step(run_dir)
    # verl writes its tracker in place: a kill during that write leaves it empty (then resume finds the step)
    tracker = (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip()
    ckpt = int(tracker) if tracker.isdigit() else None
    where = f"at step {killed_at}; " + (
        f"last checkpoint step {ckpt}" if ckpt is not None else "checkpoint tracker unreadable"
    )
    status = kit.read_status(run_dir)
    assert status["state"] == "running" and status["attempts"][-1]["end"] is None  # nobody closed it

    from grpokit.reports.status_table import collect_rows
    from grpokit.run_folder.sweep_reader import load_sweep

    # while Slurm still knows the job: final at once, the cause from Slurm's own lines, not "NonZeroExitCode"
    (row,) = collect_rows(load_sweep(sweep_dir))
    assert row.state == "failed", row
    assert row.reason.startswith("killed (signal 9) at step") and where in row.reason, row.reason
    known, elapsed = row.reason, row.elapsed_s
    assert (run_dir / "attempt_end.json").exists(), "the first verdict is recorded"

    # slurmctld forgets the job (test double): decided once the heartbeat is 10 s stale (6 beats of 1 s)
    raw = str(status["slurm"]["job_id"])
    forget = {
        "PATH": f"{FORGETS}{os.pathsep}{os.environ['PATH']}",
        "GRPOKIT_FORGOTTEN_JOBS": f"{job_id},{raw}",
        "GRPOKIT_PYTHON": kit.python,
    }
    for key, value in forget.items():
        monkeypatch.setenv(key, value)
    from grpokit.slurm.job_states import job_states

    assert job_states([job_id]) == {}, "the test double still shows the job"
    # the recorded verdict stands at once (before, "running" until the heartbeat was stale), and after
    # the heartbeat is stale (10 s: 6 beats of 1 s): the same reason; elapsed stopped at the last beat
    for wait_s in (0, 12):
        time.sleep(wait_s)
        (row,) = collect_rows(load_sweep(sweep_dir))
        assert (row.state, row.reason, row.eta_s) == ("failed", known, None), row
        assert abs(row.elapsed_s - elapsed) < 1, (row.elapsed_s, elapsed)
    out = kit.run("status.py", [str(sweep_dir), "--json"], env=forget, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    (shown,) = json.loads(out.stdout)
    assert (shown["state"], shown["reason"]) == ("failed", known)

    # wait=true returns for it (this submission's attempt 1)
    from grpokit.config.point import PointSpec
    from grpokit.submit.wait import wait_for

    spec = PointSpec.from_json((run_dir / "point.json").read_text())
    assert wait_for([spec], [job_id], [0], poll_s=0.5) == ["failed"]

    # resubmit takes it again and it resumes from its last checkpoint
    again = kit.run("resubmit.py", [str(sweep_dir)], env={**env, **forget}, timeout=120)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    final = await_(
        "resumed and completed",
        lambda: (s := kit.read_status(run_dir))["state"] == "completed" and len(s["attempts"]) == 2 and s,
        300,
        every=1.0,
    )
    first, second = final["attempts"]
    assert first["ended_by"] == "killed" and first["reason"] == known, first
    assert first["slurm_state"] == "FAILED", "Slurm's end state, not requeued"
    assert where in first["reason"], first
    if ckpt is not None:
        assert second["resume_step"] == ckpt, final
    else:  # resume found the newest complete step itself
        assert second["resume_step"] is not None and second["resume_step"] <= killed_at, final
    assert final["last_step"] == 16, final
    print(f"wall time {time.monotonic() - t0:.0f} s")


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MB tmpfs (root), unmounted at the end (after the test's job left it)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)], check=True)
    yield mount
    for _ in range(60):
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
            return
        time.sleep(1)
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Write ``folder/filler`` until the file system is full; returns its path."""
    path = folder / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (256 << 10, 4096, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                continue
    finally:
        os.close(fd)
    return path


@pytest.mark.timeout(420)
@pytest.mark.parametrize("root", ["logs_root", "checkpoint_root"])
def test_a_full_disk_is_named_reaches_status_and_is_not_retried(kit, slurm, kit_overrides, tmp_path, small_disk, root):
    """logs_root full: status.json cannot be rewritten, the reason comes from heartbeat.json.
    checkpoint_root full: the trainer's symptom is not the cause; ``disk_full`` from the first
    attempt, not retried on another node (runtime.max_retries=1 would retry a crash)."""
    t0 = time.monotonic()
    overrides = [
        *[o for o in kit_overrides if not (root == "logs_root" and o.startswith("logs_root="))],
        f"{root}={small_disk}",
        "verl.trainer.total_training_steps=16",
        "runtime.heartbeat_s=1",
        "runtime.max_retries=1",
        "runtime.retry_backoff_s=0",
    ]
    sweep_dir, run_dir, job_id = sweep(kit, tmp_path, "full", overrides, {"FAKE_TRAINER_STEP_S": "0.5"})
    try:
        await_("at step 3", lambda: (run_dir / "heartbeat.json").exists() and last_step(run_dir) >= 3, 240)
        filler = fill(small_disk)
        await_("ended in Slurm", lambda: slurm_ended(job_id), 180)

        record = json.loads((run_dir / "heartbeat.json").read_text())
        assert (record["state"], record["ended_by"]) == ("failed", "disk_full"), record
        assert record["reason"].startswith(f"disk full writing {small_disk}"), record["reason"]
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True, text=True)
        assert "PENDING" not in out.stdout, f"a full shared disk was retried: {out.stdout}"

        from grpokit.reports.status_table import collect_rows
        from grpokit.run_folder.sweep_reader import load_sweep

        (row,) = collect_rows(load_sweep(sweep_dir))
        assert row.state == "failed" and row.reason == record["reason"].splitlines()[0], row
        status = kit.read_status(run_dir)
        written = status["state"]
        if root == "checkpoint_root":  # the logs disk has room: status.json says it itself
            assert (written, len(status["attempts"]), status["attempts"][0]["ended_by"]) == ("failed", 1, "disk_full")
            assert "retry" not in status["attempts"][0], status
        filler.unlink()
        shown = kit.run("status.py", [str(sweep_dir), "--json"], timeout=120)
        assert json.loads(shown.stdout)[0]["reason"].startswith("disk full writing"), shown.stdout
        print(
            f"reason: {row.reason}; status.json as the full disk left it: {written}; "
            f"wall time {time.monotonic() - t0:.0f} s"
        )
    finally:
        subprocess.run(["scancel", job_id], check=False)
        await_("gone", lambda: slurm_ended(job_id), 60)

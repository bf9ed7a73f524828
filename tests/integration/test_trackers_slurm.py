"""W&B across requeues on the real Slurm test cluster (issue 16 item 1).

The trainer is the TEST DOUBLE tests/doubles/fake_verl_trainer.py (verl needs a GPU), which logs
through verl's REAL ``verl.utils.tracking.Tracking`` when ``trainer.logger`` names ``wandb``: the
``wandb.init`` call is verl's own, W&B's run id, resume, group and folder come from the
environment the kit gives the trainer. W&B runs offline (no network here), as on compute nodes
without internet; its ``.wandb`` transaction logs are read back record by record.
"""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

import pytest

from grpokit.runtime import trackers

pytestmark = pytest.mark.slurm


def wandb_records(path: Path):
    """The protobuf records of a ``run-<id>.wandb`` file: W&B's LevelDB-style log (7-byte header
    ``:W&B`` + magic + version, 32 KiB blocks of chunks with a 7-byte header: crc, length, type
    FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4), each record a ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def offline_run(folder: Path) -> dict:
    """Run id, group, project, name and the history steps of one ``offline-run-*`` folder."""
    (log,) = folder.glob("run-*.wandb")
    out = {"steps": []}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            out.update(run_id=run.run_id, group=run.run_group, project=run.project, name=run.display_name)
        elif kind == "history":
            out["steps"].append(record.history.step.num)
    return out


def attempt_steps(run_dir: Path, attempt: int) -> list[int]:
    path = run_dir / "attempts" / str(attempt) / "metrics.jsonl"
    return [json.loads(x)["step"] for x in path.read_text().splitlines()] if path.exists() else []


def wait_for(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.timeout(600)
def test_two_attempts_of_a_point_write_one_wandb_run(kit, slurm, kit_overrides, tmp_path):
    """One point, its attempt 1 stopped by ``scancel --signal=USR2`` (Slurm delivers it), requeued,
    resumed: both attempts log to one W&B run (one id), every step once."""
    name = "wandb_requeue"
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            "verl.trainer.logger=[console,wandb]",  # as in verl's example scripts
            "runtime.wandb_mode=offline",  # no network here, as on many compute nodes
            "verl.trainer.total_training_steps=8",
            "verl.trainer.save_freq=4",
            "verl.trainer.test_freq=-1",
            f"sweep_name={name}",
        ],
        env={"FAKE_TRAINER_STEP_S": "1.0"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (point,) = kit.manifest(tmp_path / "logs" / name)["points"]
    run_dir = Path(point["run_dir"])
    wait_for("3 steps of attempt 1", lambda: len(attempt_steps(run_dir, 1)) >= 3, 300)
    subprocess.run(["scancel", "--signal=USR2", point["job_id"]], check=True, timeout=30)
    (status,) = kit.wait_final([run_dir], timeout=400)

    assert status["state"] == "completed", status.get("reason")
    assert [a["ended_by"] for a in status["attempts"]] == ["preempted", "completed"], status["attempts"]
    folders = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(folders) == 2, f"one offline folder per attempt: {folders}"
    runs = [offline_run(f) for f in folders]
    spec_id = trackers.wandb_run_id(name, run_dir.name)
    assert {r["run_id"] for r in runs} == {spec_id}, "both attempts write the same W&B run"
    assert {(r["group"], r["project"], r["name"]) for r in runs} == {(name, name, run_dir.name)}
    first, second = (r["steps"] for r in runs)
    assert first and second, runs
    assert first == attempt_steps(run_dir, 1) and second == attempt_steps(run_dir, 2)
    assert first + second == list(range(1, 9)), "every step once across the two attempts"

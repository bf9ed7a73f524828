"""``status.json`` through its typed record (grpokit.run_folder.status_record): the format of
docs/run-folder.md unchanged, files of earlier kit versions still read, a foreign key a one-line error."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path

import pytest

from grpokit.run_folder import PointState, StatusFile, read_status, write_status
from grpokit.run_folder.atomic import write_json_atomic
from grpokit.run_folder.manifest import write_manifest
from grpokit.run_folder.status_record import (
    Attempt,
    HalvingMark,
    PointStatus,
    SlurmAllocation,
    StatusFileError,
)
from grpokit.run_folder.sweep_reader import load_sweep

REPO = Path(__file__).resolve().parents[2]
T = "2026-12-03T07:00:00+00:00"

#: Every key of the format, as docs/run-folder.md shows it (a point pruned by successive halving
#: after a crash retry on another node, a resubmission and a checkpoint set aside).
FULL = {
    "state": "pruned",
    "reason": "rung 0 (step 8): rank 4/4 by val_acc 0.1 < cut 0.3 (kept 2 of 4, halving.keep=0.5)",
    "exit_code": 0,
    "target_step": 8,
    "last_step": 8,
    "slurm": {
        "job_id": "123",
        "array_job_id": "120",
        "array_task_id": 3,
        "restart_count": 1,
        "nodelist": "node2",
        "partition": "gpu",
        "gpus": 1,
    },
    "resubmission": "2026-12-03T06:59:00+00:00-1a2b3c4d",
    "rehearsal": True,
    "halving": {"stage": 0, "rung": 8, "rank": 4},
    "attempts": [
        {
            "attempt": 1,
            "start": T,
            "end": T,
            "ended_by": "failed",
            "slurm_state": "REQUEUED",
            "exit_code": 1,
            "first_step": 1,
            "last_step": 5,
            "elapsed_s": 61.5,
            "resubmission": "2026-12-03T06:59:00+00:00-1a2b3c4d",
            "crash": "RuntimeError",
            "nodes": ["node1"],
            "reason": "RuntimeError: CUDA error: an illegal memory access was encountered",
            "retry": "retry 1 of runtime.max_retries=1 in 60 s, excluding node1",
            "resume_step": None,
            "compile_cache_seeded_from": "/logs/s/000_a/checkpoints/.compile_cache",
            "timings": {"ray_ready_s": 3.1, "sidecars_ready_s": 0.4, "trainer_launched_s": 9.0},
        },
        {
            "attempt": 2,
            "start": T,
            "end": T,
            "ended_by": "completed",
            "slurm_state": None,
            "exit_code": 0,
            "first_step": 5,
            "last_step": 8,
            "elapsed_s": 120.0,
            "resubmission": "2026-12-03T06:59:00+00:00-1a2b3c4d",
            "resume_step": 4,
            "checkpoint_set_aside": "checkpoint global_step_5 set aside as global_step_5.partial: no model; "
            "resuming from global_step_4",
            "timings": {"ray_ready_s": 2.9, "sidecars_ready_s": 0.3, "trainer_launched_s": 8.0},
        },
    ],
    "updated": T,
}


def test_a_full_file_reads_back_and_writes_back_byte_for_byte(tmp_path):
    write_json_atomic(tmp_path / "status.json", FULL)  # as the driver writes it
    first = (tmp_path / "status.json").read_text()
    status = read_status(tmp_path)
    assert (status.state, status.last_step, status.rehearsal) == ("pruned", 8, True)
    assert status.slurm == SlurmAllocation("123", "120", 3, 1, "node2", "gpu", 1)
    assert status.job_id == "120_3" and status.slurm.ids == {"123", "120_3"}
    assert status.halving == HalvingMark(stage=0, rung=8, rank=4)
    crashed, completed = status.attempts
    assert (crashed.crash, crashed.nodes, crashed.resume_step, crashed.timings["ray_ready_s"]) == (
        "RuntimeError",
        ("node1",),
        None,
        3.1,
    )
    assert not completed.is_open and status.last_attempt is completed and completed.retry is None
    write_status(tmp_path, status)
    assert (tmp_path / "status.json").read_text() == first, "every key, its value and null kept, in the docs' order"


def test_the_docs_show_every_key_of_the_record():
    doc = (REPO / "docs" / "run-folder.md").read_text()
    block = doc.split("## `status.json`", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    shown = set(re.findall(r'"(\w+)":', block)) - set(FULL["attempts"][0]["timings"])  # the driver's phases
    records = (PointStatus, Attempt, SlurmAllocation, HalvingMark)
    keys = {f.name for r in records for f in dataclasses.fields(r)} - {"null_keys"}
    assert shown == keys
    assert (
        set(FULL) | set(FULL["slurm"]) | set(FULL["halving"]) | set(FULL["attempts"][0]) | set(FULL["attempts"][1])
        == keys
    ), "the test's full file holds every key"


def test_the_driver_writes_the_format_it_reads(tmp_path):
    status = StatusFile(tmp_path)
    status.start_attempt(target_step=None, slurm={}, rehearsal=False)
    opened = json.loads((tmp_path / "status.json").read_text())
    assert opened["attempts"] == [
        {"attempt": 1, "start": opened["attempts"][0]["start"], "end": None, "ended_by": None}
    ]
    assert list(opened) == ["state", "reason", "target_step", "slurm", "attempts", "updated"]
    assert opened["target_step"] is None and opened["slurm"] == {}, "keys set to None are written as null"
    status.update_attempt(resume_step=None)
    status.set_target_step(4)  # verl's own count, learned at the end
    status.set_attempt_reason("preempted by Slurm at 07:00; checkpointed step 2")
    status.finish("requeued", ended_by="preempted", exit_code=None, last_step=None, timings={}, slurm_state="REQUEUED")
    closed = json.loads((tmp_path / "status.json").read_text())
    assert closed["exit_code"] is None and "last_step" not in closed, "as before: the point's last_step only when known"
    (attempt,) = closed["attempts"]
    assert attempt["resume_step"] is None and attempt["last_step"] is None and "retry" not in attempt
    assert (closed["target_step"], attempt["reason"], attempt["slurm_state"]) == (
        4,
        "preempted by Slurm at 07:00; checkpointed step 2",
        "REQUEUED",
    )
    assert read_status(tmp_path).to_json() == closed
    # the next start after a kill: the open attempt is closed with its cause, a new one opened
    again = StatusFile(tmp_path)
    again.start_attempt(target_step=4, slurm={"job_id": "78"})
    again.start_attempt(target_step=4, slurm={"job_id": "78"}, previous_end=("node_failed", "node node2 failed"))
    killed = read_status(tmp_path).attempts[1]
    assert (killed.ended_by, killed.slurm_state, killed.reason) == ("node_failed", "requeued", "node node2 failed")
    assert [a.attempt for a in read_status(tmp_path).attempts] == [1, 2, 3]


def test_a_writer_bug_is_refused_before_the_file_is_written(tmp_path):
    status = StatusFile(tmp_path)
    status.start_attempt(target_step=4, slurm={})
    before = (tmp_path / "status.json").read_text()
    with pytest.raises(StatusFileError, match=r"unknown key attempts\[-1\]\.resume_stpe"):
        status.update_attempt(resume_stpe=3)
    with pytest.raises(StatusFileError, match=r"attempts\[-1\]\.nodes='node1' must be a list of node names"):
        status.update_attempt(nodes="node1")
    assert (tmp_path / "status.json").read_text() == before


def test_files_of_earlier_kit_versions_still_read(tmp_path):
    # the first driver's file (the kit's first status writer, commit 99fd7ce): no partition, rehearsal,
    # resubmission, halving or per-attempt crash keys; ended_by words it used; an attempt killed open
    old = {
        "state": "failed",
        "attempts": [
            {"attempt": 1, "start": T, "end": T, "ended_by": "killed", "slurm_state": "requeued"},
            {
                "attempt": 2,
                "start": T,
                "end": T,
                "ended_by": "sidecar_failed",
                "exit_code": None,
                "elapsed_s": 12,
                "last_step": None,
                "timings": {"ray_ready_s": 3},
                "slurm_state": None,
            },
        ],
        "reason": "sidecar answer exited with 1 during start-up",
        "target_step": 48,
        "slurm": {"job_id": "5", "array_job_id": None, "array_task_id": None, "restart_count": 1, "nodelist": "n1"},
        "updated": T,
        "exit_code": None,
    }
    (tmp_path / "status.json").write_text(json.dumps(old))
    status = read_status(tmp_path)
    assert (status.state, status.job_id, status.rehearsal, status.halving) == ("failed", "5", None, None)
    assert [a.ended_by for a in status.attempts] == ["killed", "sidecar_failed"]
    assert status.attempts[1].elapsed_s == 12 and status.slurm.partition is None
    assert status.to_json() == old, "read and written back, an old file keeps its keys (and nulls)"
    # cancel's file for a point cancelled before its job started; a state word of older kits
    cancelled = {"state": "cancelled", "reason": "cancelled by user before it started", "attempts": []}
    assert PointStatus.from_json(cancelled).to_json() == cancelled
    older_word = PointStatus.from_json({"state": "timeout"}).point_state
    assert older_word == "timeout" and not isinstance(older_word, PointState), "the older word, as it is"
    assert read_status(tmp_path / "none").to_json() == {"state": "pending", "attempts": []}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"state": "running", "attempt": []}, "unknown key attempt (known: state, reason, exit_code"),
        ({"state": "running", "attempts": [{"attempt": 1}]}, "attempts[0].start is missing; the job's driver writes"),
        ({"state": "running", "attempts": [{"attempt": 1, "start": T, "node": "n1"}]}, "unknown key attempts[0].node"),
        ({"state": "failed", "exit_code": "1"}, "exit_code='1' must be an exit code"),
        ({"state": "running", "rehearsal": "yes"}, "rehearsal='yes' must be true or false"),
        ({"state": "running", "slurm": {"job_id": "1", "gpus": "2"}}, "slurm.gpus='2' must be a GPU count"),
        ({"state": "pruned", "halving": {"stage": 0, "rung": 2}}, "halving.rank is missing"),
        (
            {"state": "failed", "attempts": [{"attempt": 1, "start": T}, {"attempt": 2, "start": T, "nodes": "n"}]},
            "attempts[1].nodes='n' must be a list of node names",
        ),
        ({"state": "failed", "attempts": [{"attempt": "1", "start": T}]}, "attempts[0].attempt='1' must be"),
        ({"attempts": []}, "expected the driver's object with a 'state'"),
    ],
)
def test_a_foreign_status_is_one_line_naming_the_file_and_key(tmp_path, data, says):
    (tmp_path / "status.json").write_text(json.dumps(data))
    with pytest.raises(StatusFileError) as err:
        read_status(tmp_path)
    assert str(err.value).startswith(str(tmp_path / "status.json")) and says in str(err.value)
    assert "\n" not in str(err.value)
    assert isinstance(err.value, ValueError), "callers that catch ValueError for a bad status still do"
    with pytest.raises(StatusFileError):
        StatusFile(tmp_path)  # the driver refuses it with the same message


def test_the_reports_show_a_point_with_a_foreign_status_without_it(tmp_path, bare_point, caplog):
    specs = [bare_point(tmp_path, i) for i in range(2)]
    write_manifest(tmp_path, specs, [None, None], experiment="e", cluster="local", swept_keys=[])
    for s in specs:
        Path(s.run_dir).mkdir(parents=True)
    (Path(specs[0].run_dir) / "status.json").write_text(json.dumps({"state": "running", "step": 3}))
    StatusFile(specs[1].run_dir).start_attempt(target_step=4, slurm={})
    with caplog.at_level(logging.WARNING):
        sweep = load_sweep(tmp_path)
    assert sweep.points[0].status is None and sweep.points[1].status.state == "running"
    assert "unknown key step" in caplog.text and str(Path(specs[0].run_dir) / "status.json") in caplog.text


def test_cancel_writes_the_record_of_a_point_cancelled_before_it_started(tmp_path, bare_point, monkeypatch):
    from grpokit.cli import cancel
    from grpokit.run_folder import claim
    from grpokit.slurm.job_states import SlurmJobState

    root = tmp_path / "s"
    specs = [bare_point(root, i, None, root.name) for i in range(2)]
    with claim.claim(tmp_path, root.name, generated=False, resume=False) as c:
        for s in specs:
            Path(s.run_dir).mkdir(parents=True)
        write_manifest(root, specs, ["40_0", "40_1"], experiment="e", cluster="slurm", swept_keys=[])
        c.record("new", [s.name for s in specs], ["40_0", "40_1"])
    StatusFile(specs[1].run_dir).start_attempt(target_step=4, slurm={"job_id": "41"})  # started: its driver says
    states = {"40_0": "PENDING", "40_1": "RUNNING"}
    monkeypatch.setattr(cancel, "job_states", lambda ids: {j: SlurmJobState(j, states[j], "squeue") for j in ids})
    monkeypatch.setattr(cancel, "scancel", lambda ids: "")
    monkeypatch.setattr(cancel.time, "sleep", lambda _s: None)
    assert cancel.cancel(root, []) == 0
    written = json.loads((Path(specs[0].run_dir) / "status.json").read_text())
    assert list(written) == ["state", "reason", "attempts", "updated"] and written["attempts"] == []
    assert written["reason"] == "cancelled by user before it started (grpokit cancel, job 40_0)"
    assert read_status(specs[0].run_dir).state == "cancelled"
    assert read_status(specs[1].run_dir).state == "running", "a started point's status.json is its driver's"


def test_an_exclusive_write_never_replaces_a_file_a_driver_wrote_meanwhile(tmp_path):
    cancelled = PointStatus(state="cancelled", reason="cancelled by user before it started", updated=T)
    write_status(tmp_path, cancelled, exclusive=True)
    assert read_status(tmp_path) == cancelled
    StatusFile(tmp_path).start_attempt(target_step=4, slurm={})  # the driver started after all
    driver_file = (tmp_path / "status.json").read_bytes()
    with pytest.raises(FileExistsError):
        write_status(tmp_path, cancelled, exclusive=True)
    assert (tmp_path / "status.json").read_bytes() == driver_file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"], "no temp file left behind"


def test_a_reader_of_many_points_goes_on_past_a_refused_file_and_warns_once(tmp_path, bare_point, caplog):
    from grpokit.run_folder import read_status_or_none
    from grpokit.submit.wait import attempt_counts

    specs = [bare_point(tmp_path, i) for i in range(3)]
    for s in specs:
        Path(s.run_dir).mkdir(parents=True)
    (Path(specs[0].run_dir) / "status.json").write_text(json.dumps({"state": "running", "step": 3}))
    StatusFile(specs[1].run_dir).start_attempt(target_step=4, slurm={})
    with caplog.at_level(logging.WARNING):
        assert read_status_or_none(specs[0].run_dir) is None and read_status_or_none(specs[2].run_dir) is None
        assert attempt_counts(specs) == [0, 1, 0], "a wait=true poll follows the other points"
    warned = [r.getMessage() for r in caplog.records if "unknown key step" in r.getMessage()]
    assert len(warned) == 1 and str(Path(specs[0].run_dir) / "status.json") in warned[0]

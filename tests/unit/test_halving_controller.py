"""Successive halving's controller (grpokit.submit.halving_controller) on a real sweep folder, with
Slurm's side faked in-process: sbatch of the arrays and of the next controller recorded, ``squeue``
answered through the one Slurm runner (``run_slurm`` of :mod:`grpokit.slurm.named_jobs`). The Slurm run:
tests/integration/test_halving_slurm.py."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from grpokit.run_folder.halving_record import read_halving
from grpokit.submit import halving_controller
from grpokit.submit.halving import HalvingError, HalvingPlan, first_record


def test_metric_at_reads_the_last_value_at_or_before_the_rung(tmp_path):
    attempt = tmp_path / "attempts" / "1"
    attempt.mkdir(parents=True)
    rows = [
        {"step": 1, "data": {"critic/score/mean": 0.1}},
        {"step": 2, "data": {"critic/score/mean": 0.2, "val-core/openai/gsm8k/acc/mean@1": 0.5}},
        {"step": 3, "data": {"critic/score/mean": 0.3}},
    ]
    (attempt / "metrics.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    metric_at = halving_controller.metric_at
    assert metric_at(tmp_path, "val_acc", 3) == ("val-core/openai/gsm8k/acc/mean@1", 0.5)
    assert metric_at(tmp_path, "critic/score/mean", 2) == ("critic/score/mean", 0.2)
    assert metric_at(tmp_path, "actor/entropy", 3) == ("actor/entropy", None)


def _sweep(tmp_path, values: list[float], bare_point) -> tuple:
    """A sweep folder whose points all completed rung 1 (step 2) with these val accuracies."""
    from grpokit.run_folder import write_json_atomic
    from grpokit.run_folder.halving_record import write_halving

    sweep = tmp_path / "s"
    entries = []
    for i, value in enumerate(values):
        spec = bare_point(sweep, i, cluster={"kind": "slurm"}, verl_overrides=["trainer.total_training_steps=2"])
        run = sweep / spec.name
        (run / "attempts" / "1").mkdir(parents=True)
        (run / "point.json").write_text(spec.to_json())
        row = {"step": 2, "data": {"val-core/openai/gsm8k/acc/mean@1": value}}
        (run / "attempts" / "1" / "metrics.jsonl").write_bytes(orjson.dumps(row) + b"\n")
        write_json_atomic(run / "status.json", {"state": "completed", "last_step": 2, "attempts": []})
        entries.append({"name": spec.name, "index": i, "run_dir": str(run), "job_id": f"10_{i}"})
    write_json_atomic(sweep / "manifest.json", {"points": entries})
    names = [e["name"] for e in entries]
    write_halving(sweep, first_record(HalvingPlan((2, 4), 0.5, "val_acc", "max", 6), names, []))
    return sweep, names


@pytest.fixture
def slurm(monkeypatch):
    """Slurm's side of the controller, in-process: sbatch of the arrays and of the next controller
    recorded (a list of exceptions in ``fail`` is raised by the next array submissions: a controller
    that dies there); ``squeue`` through ``run_slurm`` answers ``squeue`` (``%i|%V`` lines) and
    records each command in ``asked``."""
    calls = {"arrays": [], "controllers": [], "fail": [], "squeue": "", "asked": []}

    def submit_arrays(folder, specs, *, name):
        if calls["fail"]:
            raise calls["fail"].pop(0)
        calls["arrays"].append([s.name for s in specs])
        return [f"20_{i}" for i in range(len(specs))]

    def submit_controller(sweep_dir, cluster, after, stage):
        calls["controllers"].append((stage, after))
        return f"3{stage}", f"4{stage}"

    def run_slurm(cmd):
        calls["asked"].append(cmd)
        return calls["squeue"]

    monkeypatch.setattr("grpokit.submit.arrays.submit_arrays", submit_arrays)
    monkeypatch.setattr(halving_controller, "submit_controller", submit_controller)
    monkeypatch.setattr("grpokit.slurm.named_jobs.run_slurm", run_slurm)
    return calls


def test_the_controller_run_twice_for_one_stage_submits_once(tmp_path, bare_point, slurm):
    sweep, names = _sweep(tmp_path, [0.1, 0.4, 0.3, 0.2], bare_point)
    first = halving_controller.advance(sweep, 0)
    again = halving_controller.advance(sweep, 0)  # the restart, or a requeue, of the same stage
    assert first["kept"] == again["kept"] == [names[1], names[2]]
    assert slurm["arrays"] == [[names[1], names[2]]]
    assert slurm["controllers"] == [(1, ["20"])]
    assert slurm["asked"] == [], "nothing was interrupted: Slurm is not asked"
    state = read_halving(sweep)
    assert state.stage == 1 and state.stages[1].controller == "31"
    assert state.stages[1].controller_restart == "41"
    manifest = orjson.loads((sweep / "manifest.json").read_bytes())
    assert [len(p.get("history", [])) for p in manifest["points"]] == [0, 1, 1, 0], "one resubmission each"
    pruned = orjson.loads((sweep / names[0] / "status.json").read_bytes())
    assert pruned["state"] == "pruned" and pruned["halving"] == {"stage": 0, "rung": 2, "rank": 4}
    # the last rung's controller resubmits to the final target and submits no controller after it
    for name in (names[1], names[2]):
        status = {"state": "completed", "last_step": 4, "attempts": []}
        (sweep / name / "status.json").write_bytes(orjson.dumps(status))
        (sweep / name / "attempts" / "1" / "metrics.jsonl").write_bytes(
            orjson.dumps({"step": 4, "data": {"val-core/openai/gsm8k/acc/mean@1": 0.9}}) + b"\n"
        )
    assert halving_controller.advance(sweep, 1)["kept"] == [names[1]]
    assert slurm["arrays"][-1] == [names[1]] and slurm["controllers"] == [(1, ["20"])]
    assert read_halving(sweep).stages[2].target == 6
    assert halving_controller.advance(sweep, 7) == {}


def test_a_controller_that_died_before_submitting_is_finished_by_its_restart(tmp_path, bare_point, slurm):
    sweep, names = _sweep(tmp_path, [0.1, 0.4, 0.3, 0.2], bare_point)
    slurm["fail"].append(RuntimeError("sbatch: error: Batch job submission failed"))
    with pytest.raises(RuntimeError):
        halving_controller.advance(sweep, 0)
    decided = read_halving(sweep).stages[0]
    assert decided.kept == (names[1], names[2]), "the decision is recorded before it is acted on"
    assert decided.resubmitting, "the submission began"
    pruned = orjson.loads((sweep / names[0] / "status.json").read_bytes())
    assert pruned["state"] == "pruned" and pruned["reason"].startswith("rung 1 (step 2): rank 4/4")
    # the restart finds it decided (the pruned points are no longer 'completed': not re-ranked);
    # squeue shows none of the sweep's jobs since the first began: it submits
    record = halving_controller.advance(sweep, 0)
    assert record["kept"] == [names[1], names[2]] and record["decided"] == decided.decided
    assert slurm["arrays"] == [[names[1], names[2]]] and slurm["controllers"] == [(1, ["20"])]
    assert slurm["asked"] == [["squeue", "-h", "--me", "--name", "s", "-t", "all", "-o", "%i|%V"]]


def test_a_restart_that_finds_jobs_submitted_since_the_first_began_refuses(tmp_path, bare_point, slurm):
    sweep, names = _sweep(tmp_path, [0.1, 0.4, 0.3, 0.2], bare_point)
    slurm["fail"].append(RuntimeError("node lost right after sbatch answered"))
    with pytest.raises(RuntimeError):
        halving_controller.advance(sweep, 0)
    later = (dt.datetime.now() + dt.timedelta(seconds=1)).isoformat(timespec="seconds")  # squeue: local time
    slurm["squeue"] = f"20_0|{later}\n20_1|{later}\n"
    with pytest.raises(HalvingError) as err:
        halving_controller.advance(sweep, 0)
    assert "Slurm holds job(s) 20_0, 20_1 named s since; not submitting twice" in str(err.value)
    assert str(err.value).startswith(f"rung 1 (step 2) of {sweep}: an earlier controller started resubmitting")
    assert f"({names[1]}, {names[2]}) with grpokit resubmit" in str(err.value) and "\n" not in str(err.value)
    assert slurm["arrays"] == []


def test_cancel_takes_a_pending_controllers_restart_first(tmp_path):
    from grpokit.cli.cancel import _halving_controllers

    stages = [
        {"stage": 0, "target": 2, "points": ["a"], "job_ids": ["1_0"], "controller": "31", "controller_restart": "41"},
        {"stage": 1, "target": 4, "points": ["a"], "job_ids": ["2_0"], "controller": "32", "controller_restart": "42"},
        {"stage": 2, "target": 6, "points": ["a"], "job_ids": ["3_0"], "controller": None},
    ]
    stages[0].update(ranked=[{"name": "a", "value": 0.5, "rank": 1}], kept=["a"], pruned=[], out={})  # decided
    head = {"rungs": [2, 4], "keep": 0.5, "metric": "val_acc", "mode": "max", "final_target": 6, "stage": 2}
    (tmp_path / "halving.json").write_bytes(orjson.dumps({**head, "stages": stages}))
    assert _halving_controllers(tmp_path) == ["42", "32"]
    (tmp_path / "halving.json").write_bytes(orjson.dumps({**head, "stages": stages, "extra": 1}))
    assert _halving_controllers(tmp_path) == [], "an unreadable record: the points are still cancelled"

"""Successive halving's plan checks and ranking (grpokit.submit.halving); the Slurm run is
tests/integration/test_halving_slurm.py."""

from __future__ import annotations

import dataclasses
import math

import orjson
import pytest

from grpokit.config.point import PointSpec
from grpokit.submit import halving
from grpokit.submit.halving import HalvingError, HalvingPlan, decide, plan_of, with_target


@pytest.fixture
def point(bare_point):
    """``point(verl_overrides, kind="slurm")``: one point named as a swept sweep names it."""

    def make(overrides: list[str], kind: str = "slurm") -> PointSpec:
        return bare_point("/tmp/x", 0, cluster={"kind": kind}, name="000_n-2", verl_overrides=overrides)

    return make


@pytest.fixture
def specs(point):
    return [point(["trainer.total_training_steps=6", "trainer.save_freq=2", "trainer.test_freq=2"])]


SECTION = {"rungs": [2, 4], "keep": 0.5, "metric": "val_acc", "mode": "max"}


def test_plan_and_first_rung(specs):
    plan = plan_of(SECTION, specs, [], {})
    assert plan == HalvingPlan((2, 4), 0.5, "val_acc", "max", 6)
    assert [plan.target(k) for k in range(3)] == [2, 4, 6]
    (first,) = halving.at_first_rung(specs, plan)
    assert first.verl_value("trainer.total_training_steps") == "2"
    assert first.verl_overrides.count("trainer.total_training_steps=2") == 1
    assert plan_of({**SECTION, "rungs": None}, specs, [], {}) is None


@pytest.mark.parametrize(
    ("change", "swept", "opts", "message"),
    [
        ({"rungs": [4, 2]}, [], {}, "halving.rungs=[4, 2]: steps must be >= 1 and increasing"),
        ({"rungs": ["a"]}, [], {}, "halving.rungs=['a']: must be a list of steps"),
        ({"keep": 1.0}, [], {}, "halving.keep=1.0: must be a fraction in (0, 1)"),
        ({"mode": "up"}, [], {}, "halving.mode='up'"),
        ({}, ["halving.keep"], {}, "halving.keep is swept"),
        ({}, [], {"resume": True}, "resume=true with halving.rungs: not supported"),
        ({"rungs": [2, 6]}, [], {}, "verl.trainer.total_training_steps=6: halving needs a final target above"),
    ],
)
def test_bad_plans_are_one_line(specs, change, swept, opts, message):
    with pytest.raises(HalvingError) as err:
        plan_of({**SECTION, **change}, specs, swept, opts)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_points_that_cannot_take_part_are_named(specs, point):
    no_ckpt = with_target(point(["trainer.total_training_steps=6"]), 6)
    with pytest.raises(HalvingError, match=r"^\[000_n-2\] verl\.trainer\.save_freq: the survivors resume"):
        plan_of(SECTION, [no_ckpt], [], {})
    local = point(specs[0].verl_overrides, kind="local")
    with pytest.raises(HalvingError, match="controller as a Slurm job"):
        plan_of(SECTION, [local], [], {})


def test_ranking_keeps_the_best_fraction_missing_values_last_ties_in_sweep_order():
    plan = HalvingPlan((2,), 0.5, "val_acc", "max", 4)
    values = {"a": 0.4, "b": None, "c": 0.6, "d": 0.4, "e": math.nan}
    ranked, kept = decide(values, list("abcde"), 5, plan)
    assert [r.name for r in ranked] == ["c", "a", "d", "b", "e"] and kept == 2
    ranked, kept = decide(values, list("abcde"), 5, dataclasses.replace(plan, mode="min"))
    assert [r.name for r in ranked][:3] == ["a", "d", "c"]
    assert decide({"a": 0.1}, ["a"], 8, plan)[1] == 1  # never more than were ranked, never none


def test_metric_at_reads_the_last_value_at_or_before_the_rung(tmp_path):
    attempt = tmp_path / "attempts" / "1"
    attempt.mkdir(parents=True)
    rows = [
        {"step": 1, "data": {"critic/score/mean": 0.1}},
        {"step": 2, "data": {"critic/score/mean": 0.2, "val-core/openai/gsm8k/acc/mean@1": 0.5}},
        {"step": 3, "data": {"critic/score/mean": 0.3}},
    ]
    (attempt / "metrics.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert halving.metric_at(tmp_path, "val_acc", 3) == ("val-core/openai/gsm8k/acc/mean@1", 0.5)
    assert halving.metric_at(tmp_path, "critic/score/mean", 2) == ("critic/score/mean", 0.2)
    assert halving.metric_at(tmp_path, "actor/entropy", 3) == ("actor/entropy", None)


def _sweep(tmp_path, values: list[float], bare_point) -> tuple:
    """A sweep folder whose points all completed rung 1 (step 2) with these val accuracies."""
    from grpokit.run_folder import write_json_atomic

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
    plan = HalvingPlan((2, 4), 0.5, "val_acc", "max", 6)
    names = [e["name"] for e in entries]
    state = {**plan.to_json(), "stage": 0, "stages": [{"stage": 0, "target": 2, "points": names, "job_ids": []}]}
    write_json_atomic(sweep / "halving.json", state)
    return sweep, names


@pytest.fixture
def slurm_calls(monkeypatch):
    """What the controller asks Slurm (sbatch of the arrays and of the next controller), recorded;
    a list of exceptions in ``fail`` is raised by the next array submissions (a controller that
    dies there)."""
    calls = {"arrays": [], "controllers": [], "fail": []}

    def submit_arrays(folder, specs, *, name):
        if calls["fail"]:
            raise calls["fail"].pop(0)
        calls["arrays"].append([s.name for s in specs])
        return [f"20_{i}" for i in range(len(specs))]

    def submit_controller(sweep_dir, cluster, after, stage):
        calls["controllers"].append((stage, after))
        return f"3{stage}", f"4{stage}"

    monkeypatch.setattr("grpokit.submit.arrays.submit_arrays", submit_arrays)
    monkeypatch.setattr(halving, "submit_controller", submit_controller)
    return calls


def test_the_controller_run_twice_for_one_stage_submits_once(tmp_path, bare_point, slurm_calls):
    sweep, names = _sweep(tmp_path, [0.1, 0.4, 0.3, 0.2], bare_point)
    first = halving.advance(sweep, 0)
    again = halving.advance(sweep, 0)  # the restart, or a requeue, of the same stage
    assert first["kept"] == again["kept"] == [names[1], names[2]]
    assert slurm_calls["arrays"] == [[names[1], names[2]]]
    assert slurm_calls["controllers"] == [(1, ["20"])]
    state = halving.read_halving(sweep)
    assert state["stage"] == 1 and state["stages"][1]["controller"] == "31"
    assert state["stages"][1]["controller_restart"] == "41"
    manifest = orjson.loads((sweep / "manifest.json").read_bytes())
    assert [len(p.get("history", [])) for p in manifest["points"]] == [0, 1, 1, 0], "one resubmission each"


def test_a_controller_that_died_before_submitting_is_finished_by_its_restart(
    tmp_path, bare_point, slurm_calls, monkeypatch
):
    sweep, names = _sweep(tmp_path, [0.1, 0.4, 0.3, 0.2], bare_point)
    monkeypatch.setattr(halving, "_queued_since", lambda name, since: [])  # squeue: none of the sweep's jobs
    slurm_calls["fail"].append(RuntimeError("sbatch: error: Batch job submission failed"))
    with pytest.raises(RuntimeError):
        halving.advance(sweep, 0)
    decided = halving.read_halving(sweep)["stages"][0]
    assert decided["kept"] == [names[1], names[2]], "the decision is recorded before it is acted on"
    pruned = orjson.loads((sweep / names[0] / "status.json").read_bytes())
    assert pruned["state"] == "pruned" and pruned["reason"].startswith("rung 1 (step 2): rank 4/4")
    # the restart finds it decided (the pruned points are no longer 'completed': not re-ranked)
    record = halving.advance(sweep, 0)
    assert record["kept"] == [names[1], names[2]] and record["decided"] == decided["decided"]
    assert slurm_calls["arrays"] == [[names[1], names[2]]] and slurm_calls["controllers"] == [(1, ["20"])]


def test_a_restart_that_finds_jobs_submitted_since_the_first_began_refuses(
    tmp_path, bare_point, slurm_calls, monkeypatch
):
    sweep, names = _sweep(tmp_path, [0.1, 0.4, 0.3, 0.2], bare_point)
    slurm_calls["fail"].append(RuntimeError("node lost right after sbatch answered"))
    with pytest.raises(RuntimeError):
        halving.advance(sweep, 0)
    monkeypatch.setattr(halving, "_queued_since", lambda name, since: ["20_0", "20_1"])
    with pytest.raises(HalvingError, match=r"Slurm holds job\(s\) 20_0, 20_1 of the sweep since; not submitting twice"):
        halving.advance(sweep, 0)
    assert slurm_calls["arrays"] == []


def test_cancel_takes_a_pending_controllers_restart_first(tmp_path):
    # scancel of the controller alone would satisfy its restart's afternotok: the restart goes first
    from grpokit.cli.cancel import _halving_controllers

    stages = [
        {"stage": 0, "controller": "31", "controller_restart": "41", "kept": ["a"]},  # decided: done
        {"stage": 1, "controller": "32", "controller_restart": "42"},
        {"stage": 2, "controller": None},
    ]
    (tmp_path / "halving.json").write_bytes(orjson.dumps({"stages": stages}))
    assert _halving_controllers(tmp_path) == ["42", "32"]

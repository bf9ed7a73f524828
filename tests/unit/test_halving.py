"""Successive halving's decisions (grpokit.submit.halving: plan checks, ranking, the stage's steps)
and its record (grpokit.run_folder.halving_record), without Slurm or a sweep folder: milliseconds.
The controller that acts on them: test_halving_controller.py; the Slurm run:
tests/integration/test_halving_slurm.py."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from grpokit.config.point import PointSpec
from grpokit.run_folder.halving_record import (
    HalvingRecord,
    HalvingRecordError,
    HalvingStage,
    RankedPoint,
    read_halving,
    write_halving,
)
from grpokit.submit import halving
from grpokit.submit.halving import (
    Decide,
    Done,
    HalvingError,
    HalvingPlan,
    NotRecorded,
    PointAtRung,
    Resubmit,
    SubmitController,
    decide,
    decide_stage,
    next_step,
    plan_of,
    prunes,
    with_target,
)


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


PLAN = HalvingPlan((2, 4), 0.5, "val_acc", "max", 6)
ACC = "val-core/openai/gsm8k/acc/mean@1"


def _at_rung(value: float | None, step: int = 2) -> PointAtRung:
    return PointAtRung("completed", step, ACC, value)


def test_decide_stage_ranks_those_that_reached_the_rung_and_says_where_the_others_are():
    stage = HalvingStage(0, 2, ("a", "b", "c", "d", "e", "f"), ("1_0", "1_1", "1_2", "1_3", "1_4", "1_5"))
    seen = {
        "a": _at_rung(0.2),
        "b": _at_rung(0.5),
        "c": PointAtRung("failed", None),
        "d": PointAtRung("completed", 1),  # completed short of the rung: not ranked
        "e": _at_rung(0.4),
    }  # f: never observed (no status.json yet)
    decided = decide_stage(PLAN, stage, seen, "2026-12-03T12:00:00+00:00")
    assert [r.name for r in decided.ranked] == ["b", "e", "a"]
    assert decided.kept == ("b", "e", "a") and decided.pruned == ()  # floor(0.5 x 6) = 3: all 3 ranked
    assert decided.out == {"c": "failed", "d": "completed", "f": "pending"}
    assert decided.metric_key == ACC and decided.decided == "2026-12-03T12:00:00+00:00"
    nobody = decide_stage(PLAN, stage, {}, "t")
    assert nobody.kept == () and nobody.metric_key == "val_acc" and nobody.is_decided


def _stage0(values: list[float]) -> tuple[HalvingRecord, list[str]]:
    names = [f"00{i}_p" for i in range(len(values))]
    record = halving.first_record(PLAN, names, [f"10_{i}" for i in range(len(names))])
    return halving.controller_submitted(record, 0, "30", "40"), names


def test_the_stage_steps_in_order_each_recorded_before_the_next():
    record, names = _stage0([0.1, 0.4, 0.3, 0.2])
    assert next_step(record, 0) == Decide()
    seen = {n: _at_rung(v) for n, v in zip(names, [0.1, 0.4, 0.3, 0.2], strict=True)}
    record = record.with_stage(decide_stage(PLAN, record.stages[0], seen, "t0"))
    assert next_step(record, 0) == Resubmit((names[1], names[2]), 4, None)
    began = halving.began_resubmit(record, 0, "t1")
    assert next_step(began, 0) == Resubmit((names[1], names[2]), 4, "t1"), "a restart checks Slurm first"
    record = halving.resubmitted(began, 0, next_step(began, 0), ["20_0", "20_1"])
    assert record.stage == 1 and record.stages[1].points == (names[1], names[2])
    assert next_step(record, 0) == SubmitController(1, ("20",), None)
    began = halving.began_controller(record, 1, "t2")
    assert next_step(began, 0) == SubmitController(1, ("20",), "t2")
    record = halving.controller_submitted(began, 1, "31", "41")
    assert isinstance(next_step(record, 0), Done)
    # stage 1 (the last rung): decide, resubmit to the final target, and no controller after it
    record = record.with_stage(decide_stage(PLAN, record.stages[1], {names[1]: _at_rung(0.4, 4)}, "t3"))
    assert next_step(record, 1) == Resubmit((names[1],), 6, None)
    record = halving.resubmitted(record, 1, next_step(record, 1), ["21_0"])
    assert record.stage == 2 and isinstance(next_step(record, 1), Done)
    assert "final target 6" in next_step(record, 2).why
    assert next_step(record, 3) == NotRecorded() and next_step(None, 0) == NotRecorded()


def test_a_stage_where_no_point_reached_the_rung_ends_there():
    record, _ = _stage0([0.1, 0.2])
    record = record.with_stage(decide_stage(PLAN, record.stages[0], {}, "t"))
    assert next_step(record, 0) == Done("rung 1 (step 2): no point completed the rung; nothing continues")


def test_prune_reasons_name_rank_metric_cut_and_fraction():
    record, names = _stage0([0.1, 0.4, 0.3, 0.2])
    assert prunes(record, 0) == [], "nothing is pruned before the decision"
    seen = {n: _at_rung(v) for n, v in zip(names, [0.1, 0.4, 0.3, None], strict=True)}
    record = record.with_stage(decide_stage(PLAN, record.stages[0], seen, "t"))
    got = prunes(record, 0)
    assert [p.name for p in got] == [names[0], names[3]]
    assert got[0].reason == (
        f"rung 1 (step 2): rank 3/4 by val_acc ({ACC}) 0.1 < cut 0.3 (kept 2 of 4, halving.keep=0.5)"
    )
    assert got[1].reason == (
        f"rung 1 (step 2): rank 4/4 by val_acc ({ACC}) none, cut 0.3 "
        "(not logged, which ranks last; kept 2 of 4, halving.keep=0.5)"
    )
    assert got[0].marker == {"stage": 0, "rung": 2, "rank": 3}
    low = dataclasses.replace(record, plan=dataclasses.replace(PLAN, mode="min", metric=ACC))
    assert f"by {ACC} 0.1 > cut" in prunes(low, 0)[0].reason


def test_a_tie_at_the_cut_is_worded_as_a_tie_lost_by_sweep_order():
    # Issue 37: a tie read "0.532 < cut 0.532". decide() keeps the earlier point of the sweep.
    record, names = _stage0([0.6, 0.532, 0.532, 0.1])
    seen = {n: _at_rung(v) for n, v in zip(names, [0.6, 0.532, 0.532, 0.1], strict=True)}
    record = record.with_stage(decide_stage(PLAN, record.stages[0], seen, "t"))
    assert record.stages[0].kept == (names[0], names[1])  # of the tied two, the earlier one
    tied = prunes(record, 0)[0]
    assert tied.name == names[2] and tied.reason == (
        f"rung 1 (step 2): rank 3/4 by val_acc ({ACC}) 0.532 = cut 0.532 "
        "(a tie: ties go to the point earlier in the sweep; kept 2 of 4, halving.keep=0.5)"
    )


def test_a_later_rungs_tie_is_lost_by_the_previous_rungs_rank():
    # At rung 2 the stage's points are rung 1's kept ones in rank order: decide() breaks ties by it.
    order = ["002_p", "000_p"]  # 002 ranked above 000 at rung 1
    ranked, kept = decide({"000_p": 0.5, "002_p": 0.5}, order, 2, dataclasses.replace(PLAN, keep=0.5))
    assert [r.name for r in ranked] == order and kept == 1
    assert halving.versus_cut(0.5, 0.5, PLAN, 1) == (
        "0.5 = cut 0.5",
        "a tie: ties go to the better rank at rung 1 (step 2); ",
    )
    assert halving.versus_cut(None, None, PLAN, 0)[0] == "none = cut none"


def test_values_equal_to_four_digits_are_shown_with_the_digits_that_tell_them_apart():
    assert halving.versus_cut(0.53196, 0.53203, PLAN, 0) == ("0.53196 < cut 0.53203", "")
    low = dataclasses.replace(PLAN, mode="min")
    assert halving.versus_cut(0.2, 0.1, low, 0) == ("0.2 > cut 0.1", "")
    assert halving.versus_cut(math.nan, 0.1, PLAN, 0) == ("none, cut 0.1", "not logged, which ranks last; ")


# -- halving.json as a typed record ----------------------------------------------------------------------
#: halving.json as the controller wrote it before the typed record (a sweep folder of that time).
OLD_FILE = {
    "rungs": [2, 4],
    "keep": 0.5,
    "metric": "val_acc",
    "mode": "max",
    "final_target": 6,
    "stage": 1,
    "stages": [
        {
            "stage": 0,
            "target": 2,
            "points": ["000_a", "001_b"],
            "job_ids": ["10_0", "10_1"],
            "controller": "30",
            "controller_restart": "40",
            "metric_key": ACC,
            "ranked": [{"name": "001_b", "value": 0.5, "rank": 1}, {"name": "000_a", "value": None, "rank": 2}],
            "kept": ["001_b"],
            "pruned": ["000_a"],
            "out": {},
            "decided": "2026-12-01T10:00:00+00:00",
            "resubmitting": "2026-12-01T10:00:01+00:00",
        },
        {"stage": 1, "target": 4, "points": ["001_b"], "job_ids": ["20_0"], "controller": None},
    ],
}


def test_old_halving_json_reads_and_writes_back_unchanged(tmp_path):
    (tmp_path / "halving.json").write_text(json.dumps(OLD_FILE))
    record = read_halving(tmp_path)
    assert record.plan == PLAN and record.stage == 1
    assert record.stages[0].ranked == (RankedPoint("001_b", 0.5, 1), RankedPoint("000_a", None, 2))
    assert record.stages[1].kept is None and not record.stages[1].is_decided
    written = record.to_json()
    assert written["stages"][0] == OLD_FILE["stages"][0]
    assert written["stages"][1] == {**OLD_FILE["stages"][1], "controller_restart": None}
    write_halving(tmp_path, record)
    assert read_halving(tmp_path) == record
    assert read_halving(tmp_path / "nowhere") is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("final_target"), "final_target is missing"),
        (lambda d: d.update(keep_fraction=0.5), "unknown key keep_fraction (known: rungs, keep"),
        (lambda d: d["stages"][1].update(kept="001_b"), "stages[1].kept='001_b' must be a list of point names"),
        (lambda d: d["stages"][0]["ranked"][0].pop("rank"), "stages[0].ranked[0].rank is missing"),
        (lambda d: d.update(mode="up"), "mode='up' must be max or min"),
        (lambda d: d.update(stages={}), "stages={} must be a list of stages"),
    ],
)
def test_a_bad_halving_json_is_one_line_naming_the_file_and_key(tmp_path, change, message):
    data = json.loads(json.dumps(OLD_FILE))
    change(data)
    (tmp_path / "halving.json").write_text(json.dumps(data))
    with pytest.raises(HalvingRecordError) as err:
        read_halving(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'halving.json'}: ") and message in str(err.value)
    assert "\n" not in str(err.value)
    (tmp_path / "halving.json").write_text("{not json")
    with pytest.raises(HalvingRecordError, match="halving.json: not JSON"):
        read_halving(tmp_path)


def test_pending_controllers_restart_first_decided_stages_left_alone():
    # scancel of the controller alone would satisfy its restart's afternotok: the restart goes first
    record = HalvingRecord.from_json(OLD_FILE)
    record = halving.controller_submitted(record, 1, "31", "41")
    record = record.with_stage(HalvingStage(2, 6, ("001_b",), ("21_0",)))
    assert record.pending_controllers() == ["41", "31"]

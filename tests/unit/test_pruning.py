"""The pruning rules (grpokit.runtime.processes.pruning) as a table, the settings' errors, and the watcher."""

from __future__ import annotations

import json
import time
from pathlib import Path

import orjson
import pytest

from grpokit.runtime.processes import pruning
from grpokit.runtime.processes.pruning import PruningRules, check

NAN = float("nan")


def rows(*datas: dict) -> list[dict]:
    return [{"step": i, "data": d} for i, d in enumerate(datas, start=1)]


OK = {"actor/pg_loss": 0.01, "actor/grad_norm": 0.5, "actor/kl_loss": 0.001, "actor/entropy": 1.2}
DEFAULT = PruningRules()

CASES = [
    # (id, rules, rows, expected (rule, step) or None)
    ("healthy", DEFAULT, rows(OK, OK, OK), None),
    ("nan grad norm (orjson null)", DEFAULT, rows(OK, {**OK, "actor/grad_norm": None}), ("nonfinite_steps", 2)),
    ("inf pg loss", DEFAULT, rows({**OK, "actor/pg_loss": float("inf")}), ("nonfinite_steps", 1)),
    ("nan kl", DEFAULT, rows(OK, OK, {**OK, "actor/ppo_kl": NAN}), ("nonfinite_steps", 3)),
    ("key absent is not nan", DEFAULT, rows({"critic/score/mean": 0.1}), None),
    (
        "nonfinite needs k in a row",
        PruningRules(nonfinite_steps=2),
        rows({**OK, "actor/grad_norm": None}, OK, {**OK, "actor/grad_norm": None}),
        None,
    ),
    (
        "nonfinite k in a row fires",
        PruningRules(nonfinite_steps=2),
        rows(OK, {**OK, "actor/grad_norm": None}, {**OK, "actor/pg_loss": None}),
        ("nonfinite_steps", 3),
    ),
    ("nonfinite off", PruningRules(nonfinite_steps=None, kl_max=9), rows({**OK, "actor/grad_norm": None}), None),
    ("kl above bound", PruningRules(kl_max=0.1), rows(OK, {**OK, "actor/kl_loss": 0.2}), ("kl_max", 2)),
    ("kl at bound", PruningRules(kl_max=0.1), rows({**OK, "actor/kl_loss": 0.1}), None),
    (
        "ppo_kl when no kl_loss",
        PruningRules(kl_max=0.1),
        rows({"actor/ppo_kl": 0.5}),
        ("kl_max", 1),
    ),
    ("entropy collapse", PruningRules(entropy_min=0.05), rows(OK, {**OK, "actor/entropy": 0.01}), ("entropy_min", 2)),
    (
        "reward stuck 3 steps",
        PruningRules(reward_stuck_at=0.1, reward_stuck_steps=3),
        rows(*[{"critic/score/mean": 0.1}] * 3),
        ("reward_stuck_at", 3),
    ),
    (
        "reward stuck broken by one step",
        PruningRules(reward_stuck_at=0.1, reward_stuck_steps=3),
        rows(
            {"critic/score/mean": 0.1},
            {"critic/score/mean": 0.1},
            {"critic/score/mean": 0.3},
            {"critic/score/mean": 0.1},
        ),
        None,
    ),
    ("min_step holds rules back", PruningRules(entropy_min=0.5, min_step=3), rows({"actor/entropy": 0.1}) * 1, None),
]


@pytest.mark.parametrize(("rules", "series", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule_table(rules, series, expected):
    verdict = check(rules, series)
    assert (None if verdict is None else (verdict.rule, verdict.step)) == expected
    if verdict:
        assert f"step {verdict.step}" in verdict.reason and "runtime.pruning." in verdict.reason


def test_steps_seen_again_are_not_counted_twice():
    rules = PruningRules(reward_stuck_at=0.0, reward_stuck_steps=3)
    series = [{"step": s, "data": {"critic/score/mean": 0.0}} for s in (1, 2, 1, 2)]
    assert check(rules, series) is None


def test_reason_names_the_values():
    verdict = check(DEFAULT, rows(OK, {**OK, "actor/grad_norm": None}))
    assert verdict.reason.startswith("step 2: non-finite actor/grad_norm=NaN/inf")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"kl_mx": 1}, "runtime.pruning.kl_mx: no such rule"),
        ({"kl_max": "high"}, "runtime.pruning.kl_max must be a number"),
        ({"nonfinite_steps": 0}, "runtime.pruning.nonfinite_steps must be >= 1"),
        ({"reward_stuck_steps": 2.5}, "runtime.pruning.reward_stuck_steps must be a whole number"),
        ({"min_step": None}, "runtime.pruning.min_step cannot be null"),
        ([1], "runtime.pruning must be a mapping"),
    ],
)
def test_bad_settings_name_the_key(section, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        PruningRules.from_runtime({"pruning": section})


def test_defaults_and_off():
    assert PruningRules.from_runtime({}) == PruningRules(nonfinite_steps=1)
    assert PruningRules.from_runtime({"pruning": None}) is None
    assert PruningRules.from_runtime({"pruning": {"nonfinite_steps": None}}) is None
    assert PruningRules.from_runtime({"pruning": {"kl_max": 0.5}}).kl_max == 0.5


def test_watcher_reads_appended_rows_requests_a_save_then_forces_a_stop(tmp_path: Path):
    """The driver's watcher: earlier attempts' merged rows seed the runs; the attempt's file is read
    as verl writes it (orjson, NaN as null, a partial last line waits); one save request; a trainer
    that does not stop within the deadline is stopped."""
    run, attempt, ctl = tmp_path, tmp_path / "attempts" / "2", tmp_path / "control"
    attempt.mkdir(parents=True)
    ctl.mkdir()
    stuck = {"critic/score/mean": 0.2}
    (run / "metrics.jsonl").write_bytes(b"".join(orjson.dumps({"step": s, "data": stuck}) + b"\n" for s in (1, 2)))
    calls, alive = [], {"v": True}
    watch = pruning.start_watch(
        {"pruning": {"reward_stuck_at": 0.2, "reward_stuck_steps": 4}, "save_deadline_s": 1},
        run,
        attempt,
        ctl,
        request_stop=lambda v: calls.append(("save", v.rule)),
        alive=lambda: alive["v"],
        force_stop=lambda: (calls.append(("kill", None)), alive.update(v=False)),
    )
    with open(attempt / "metrics.jsonl", "wb", buffering=0) as f:
        f.write(orjson.dumps({"step": 3, "data": stuck}) + b"\n")
        time.sleep(1.5)
        assert calls == []
        line = orjson.dumps({"step": 4, "data": stuck}) + b"\n"
        f.write(line[:10])  # half a line: not read yet
        time.sleep(1.5)
        assert calls == []
        f.write(line[10:])
    watch.join(timeout=10)
    assert calls == [("save", "reward_stuck_at"), ("kill", None)]
    verdict = pruning.recorded(ctl)
    assert verdict.step == 4 and "for 4 steps" in verdict.reason
    assert json.loads((ctl / pruning.VERDICT_FILE).read_text())["rule"] == "reward_stuck_at"


def test_a_verdict_met_before_a_resubmission_is_not_acted_on_again(tmp_path: Path):
    ctl = tmp_path / "control"
    ctl.mkdir()
    (tmp_path / "metrics.jsonl").write_bytes(orjson.dumps({"step": 1, "data": {"actor/grad_norm": None}}) + b"\n")
    calls = []
    watch = pruning.start_watch(
        {},
        tmp_path,
        tmp_path / "attempts" / "2",
        ctl,
        request_stop=calls.append,
        alive=lambda: len(calls) == 0 and time.monotonic() < deadline,
        force_stop=lambda: None,
    )
    deadline = time.monotonic() + 2
    watch.join(timeout=5)
    assert calls == [] and pruning.recorded(ctl) is None

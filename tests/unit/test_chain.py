"""Chained evaluation (after=[merge,eval]): the plan's refusals, the job's record, the report's columns.

The chained job's eval step runs ``grpokit serve-eval`` against the OpenAI-compatible TEST DOUBLE
tests/doubles/openai_chat_double.py (``vllm serve`` needs a GPU), started through serve-eval's own
``--server-command``; the merge is verl's real model merger on a real world-size-1 checkpoint.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from grpokit.config.schema import ChainConf
from grpokit.evaluation import chained_job as chain_job
from grpokit.reports.chain_view import chain_columns
from grpokit.slurm.job_states import SlurmJobState
from grpokit.submit import chain

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "openai_chat_double.py"


def _slurm_point(bare_point, tmp_path, **fields):
    return bare_point(tmp_path, 0, {"kind": "slurm"}, verl_overrides=["trainer.save_freq=2"], **fields)


@pytest.mark.parametrize(
    ("after", "message"),
    [
        (["merge", "evl"], "after: 'evl' is not a step; did you mean eval?"),
        (["eval"], "after=[eval]: eval serves the merged model <run>/hf; chain both: after=[merge,eval]"),
        (["merge", "merge"], "after=[merge,merge]: a step is named twice; e.g. after=[merge,eval]"),
    ],
)
def test_bad_steps_are_refused_in_one_line(after, message, bare_point, tmp_path):
    with pytest.raises(chain.ChainError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        chain.plan_of(after, {}, [_slurm_point(bare_point, tmp_path)], [], False)


def test_plan_refusals_name_point_and_key(bare_point, tmp_path):
    slurm = _slurm_point(bare_point, tmp_path)
    assert chain.plan_of([], {}, [slurm], [], False) is None
    plan = chain.plan_of("merge,eval", {"limit": 5}, [slurm], [], False)
    assert plan.steps == ("merge", "eval") and plan.settings.limit == 5
    with pytest.raises(chain.ChainError, match="^chain.limt: no such key; did you mean chain.limit"):
        chain.plan_of(["merge"], {"limt": 5}, [slurm], [], False)
    with pytest.raises(chain.ChainError, match="chaining and successive halving do not combine"):
        chain.plan_of(["merge"], {}, [slurm], [], True)
    with pytest.raises(chain.ChainError, match="^after is swept"):
        chain.plan_of(["merge"], {}, [slurm], ["after"], False)
    local = bare_point(tmp_path, 1, {"kind": "local"}, verl_overrides=["trainer.save_freq=2"])
    with pytest.raises(chain.ChainError, match=r"^\[001\] after=\['merge'\]: the chain is a Slurm job"):
        chain.plan_of(["merge"], {}, [local], [], False)
    no_ckpt = bare_point(tmp_path, 2, {"kind": "slurm"}, verl_overrides=["trainer.save_freq=-1"])
    with pytest.raises(chain.ChainError, match=r"^\[002\] verl.trainer.save_freq: merge needs the final checkpoint"):
        chain.plan_of(["merge"], {}, [no_ckpt], [], False)


def test_job_argv_and_plan_record(tmp_path):
    plan = chain.ChainPlan(("merge", "eval"), ChainConf(limit=3, server_command=["python", "x.py", "{port}"]))
    chain.record_plan(tmp_path, plan)
    state = chain.read_chain(tmp_path)
    assert state["after"] == ["merge", "eval"] and state["points"] == {}
    argv = chain.job_argv("/r", state)
    assert argv[:5] == [sys.executable, "-m", "grpokit.evaluation.chained_job", "/r", "--steps"]
    assert argv[5:] == [
        "merge,eval",
        "--limit",
        "3",
        "--max-tokens",
        "1024",
        "--server-command",
        '["python", "x.py", "{port}"]',
    ]
    # resume without after: the plan says nothing is chained now; earlier records stay
    state["points"] = {"000": {"job_id": "7"}}
    (tmp_path / "chain.json").write_text(json.dumps(state))
    chain.record_plan(tmp_path, None)
    assert chain.read_chain(tmp_path)["after"] == [] and chain.read_chain(tmp_path)["points"]["000"]["job_id"] == "7"


def _real_checkpoint(run: Path, model_dir: Path, step: int = 2) -> None:
    """verl's world-size-1 FSDP checkpoint of the tiny model (as FAKE_TRAINER_REAL_WEIGHTS writes it)."""
    sys.path.insert(0, str(REPO / "tests" / "doubles"))
    try:
        import fake_verl_trainer
    finally:
        sys.path.pop(0)
    actor = run / "checkpoints" / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    fake_verl_trainer.real_weights(actor, model_dir, 1)
    fake_verl_trainer.write_pt(actor.parent / "data.pt", {})
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))


def _point_files(run: Path, bare_point, tmp_path, model_dir: Path, parquet: Path, state: str) -> None:
    spec = bare_point(
        tmp_path,
        0,
        {"kind": "slurm"},
        name=run.name,
        verl_overrides=[f"actor_rollout_ref.model.path={model_dir}", f"data.val_files={parquet}"],
    )
    run.mkdir(parents=True, exist_ok=True)
    (run / "point.json").write_text(spec.to_json())
    (run / "status.json").write_text(json.dumps({"state": state, "attempts": []}))


@pytest.mark.timeout(300)
def test_chain_job_merges_for_real_and_evaluates(tiny_model_dir, bare_point, tmp_path, gsm8k_dir, monkeypatch):
    run = tmp_path / "000"
    _point_files(run, bare_point, tmp_path, tiny_model_dir, gsm8k_dir / "test.parquet", "completed")
    _real_checkpoint(run, tiny_model_dir)
    (run / "hf").mkdir()
    (run / "hf" / "by_hand.txt").write_text("an earlier merge")  # moved aside, never overwritten
    rows = pd.read_parquet(gsm8k_dir / "test.parquet").head(2).to_dict("records")
    keys = {r["prompt"][-1]["content"][:60]: f"#### {r['reward_model']['ground_truth']}" for r in rows}
    (tmp_path / "trained.json").write_text(json.dumps(keys))
    (tmp_path / "base.json").write_text(json.dumps({}))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    template = json.dumps(
        [
            "python",
            str(DOUBLE),
            "--port",
            "{port}",
            "--served-model-name",
            "{name}",
            "--answers",
            f"{tmp_path}/{{name}}.json",
        ]
    )
    code = chain_job.main([str(run), "--steps", "merge,eval", "--limit", "2", "--server-command", template])
    record = json.loads((run / "chain_status.json").read_text())
    assert code == 0, record
    assert record["state"] == "completed" and record["job_id"] == "77" and record["merge"]["step"] == 2
    assert record["eval"]["n"] == 2 and record["eval"]["base"] == 0.0 and record["eval"]["trained"] == 1.0
    assert record["eval"]["delta"] == 1.0
    from safetensors.torch import load_file

    assert load_file(run / "hf" / "model.safetensors")  # verl's merger wrote the model
    moved = [p for p in tmp_path.glob("000/hf.*") if (p / "by_hand.txt").exists()]
    assert len(moved) == 1


def test_chain_job_skips_a_point_that_did_not_complete_and_fails_in_one_line(bare_point, tmp_path, gsm8k_dir):
    run = tmp_path / "000"
    _point_files(run, bare_point, tmp_path, tmp_path, gsm8k_dir / "test.parquet", "skipped_no_gpu")
    assert chain_job.main([str(run)]) == 0
    record = json.loads((run / "chain_status.json").read_text())
    assert record["state"] == "skipped" and record["reason"] == "point ended skipped_no_gpu: nothing to merge"
    (run / "status.json").write_text(json.dumps({"state": "completed", "attempts": []}))
    assert chain_job.main([str(run)]) == 1  # no checkpoint at all
    record = json.loads((run / "chain_status.json").read_text())
    assert record["state"] == "failed" and record["reason"].startswith("merge: CheckpointError: no checkpoints under")


def _job(state: str, reason: str | None = None) -> SlurmJobState:
    return SlurmJobState(job_id="9", state=state, source="squeue", reason=reason)


def test_report_columns_say_what_happened(tmp_path):
    run = tmp_path / "000"
    run.mkdir()
    rec = {"job_id": "9", "after": "5_0"}
    assert chain_columns(None, run, "completed", None)["chain"] is None
    assert chain_columns(rec, run, "running", _job("PENDING", "Dependency")) == {
        **dict.fromkeys(("base_acc", "trained_acc", "acc_delta")),
        "chain": "queued",
        "chain_reason": "job 9: Dependency",
    }
    gone = chain_columns(rec, run, "failed", None)
    assert gone["chain"] == "cancelled" and gone["chain_reason"].startswith("never ran: point failed (afterok:5_0")
    cancelled = chain_columns(rec, run, "failed", _job("CANCELLED", "DependencyNeverSatisfied"))
    assert cancelled["chain"] == "cancelled"
    assert chain_columns(rec, run, "completed", None)["chain"] == "unknown"
    refused = chain_columns({"job_id": None, "refused": "Invalid partition"}, run, "completed", None)
    assert refused == {**refused, "chain": "not_submitted"} and "Invalid partition" in refused["chain_reason"]
    own = {"state": "running", "job_id": "9", "reason": "running merge,eval"}
    (run / "chain_status.json").write_text(json.dumps(own))
    killed = chain_columns(rec, run, "completed", _job("TIMEOUT"))
    assert killed["chain"] == "timeout" and "ended TIMEOUT while running" in killed["chain_reason"]
    done = {**own, "state": "completed", "eval": {"base": 0.25, "trained": 0.5, "delta": 0.25}}
    (run / "chain_status.json").write_text(json.dumps(done))
    cols = chain_columns(rec, run, "completed", None)
    assert (cols["chain"], cols["base_acc"], cols["trained_acc"], cols["acc_delta"]) == ("completed", 0.25, 0.5, 0.25)
    # an earlier chained job's record (before a resubmission) is not this job's
    newer = chain_columns({"job_id": "10", "after": "6_0"}, run, "queued", _job("PENDING", "Dependency"))
    assert newer["chain"] == "queued" and newer["base_acc"] is None


@pytest.mark.timeout(180)
def test_a_merger_failure_is_recorded_with_the_mergers_own_last_line(bare_point, tmp_path, gsm8k_dir):
    run = tmp_path / "000"
    _point_files(run, bare_point, tmp_path, tmp_path, gsm8k_dir / "test.parquet", "completed")
    actor = run / "checkpoints" / "global_step_2" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    for kind in ("model", "optim", "extra_state"):  # torch's zip, its data.pkl no pickle: verl's merger fails on it
        with zipfile.ZipFile(actor / f"{kind}_world_size_1_rank_0.pt", "w") as zf:
            zf.writestr(f"{kind}_world_size_1_rank_0/data.pkl", b"double" * 8)
            zf.writestr(f"{kind}_world_size_1_rank_0/version", "3\n")
    torch.save({}, actor.parent / "data.pt")
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
    assert chain_job.main([str(run), "--steps", "merge"]) == 1
    record = json.loads((run / "chain_status.json").read_text())
    actor = run / "checkpoints" / "global_step_2" / "actor"
    prefix = f"merge: merging {actor} failed: verl's model merger exited 1: "
    assert record["state"] == "failed" and record["reason"].startswith(prefix), record
    assert "UnpicklingError" in record["reason"]  # the merger's own exception, from its stderr

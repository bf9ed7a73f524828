"""W&B's environment of a point's trainer (grpokit.runtime.trackers): one run per point across attempts."""

from __future__ import annotations

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.runtime import trackers
from grpokit.validate.kit_checks import check_runtime


def point(base, index: int, swept: dict, extra: list[str] = ()):
    overrides = [*base, *extra, *(f"verl.{k}={v}" for k, v in swept.items())]
    return build_point(compose_kit(overrides), index=index, kit_overrides=overrides, swept=swept)


SWEPT = {"data.train_batch_size": 8, "actor_rollout_ref.actor.optim.lr": 1e-6}


def test_wandb_gets_one_run_id_per_point_grouped_and_tagged(base):
    from wandb.sdk.wandb_settings import Settings

    spec = point(base, 3, SWEPT, ["verl.trainer.logger=[console,wandb]"])
    env = trackers.environment(spec)
    again = trackers.environment(point(base, 3, SWEPT, ["verl.trainer.logger=[console,wandb]"]))
    other = trackers.environment(point(base, 4, {**SWEPT, "data.train_batch_size": 16}, ["verl.trainer.logger=wandb"]))
    assert env == again, "the same point (a requeue, a resubmission) gets the same run"
    assert env["WANDB_RUN_ID"] != other["WANDB_RUN_ID"]
    assert env["WANDB_RUN_ID"].startswith("unit-003-") and len(env["WANDB_RUN_ID"]) <= 64
    assert Settings(run_id=env["WANDB_RUN_ID"]).run_id == env["WANDB_RUN_ID"]  # W&B's own check of an id
    assert env["WANDB_RESUME"] == "allow" and env["WANDB_RUN_GROUP"] == "unit"
    assert env["WANDB_TAGS"] == "train_batch_size=8,lr=1e-06"
    assert env["WANDB_DIR"] == spec.run_dir
    assert "WANDB_MODE" not in env, "runtime.wandb_mode=null leaves W&B's own mode ($WANDB_MODE or online)"
    assert (
        trackers.environment(point(base, 3, SWEPT, ["verl.trainer.logger=[wandb]", "runtime.wandb_mode=offline"]))[
            "WANDB_MODE"
        ]
        == "offline"
    )


def test_no_wandb_among_the_loggers_disables_it(base):
    assert trackers.environment(point(base, 0, {})) == {"WANDB_MODE": "disabled"}  # the kit's default loggers


def test_long_sweep_names_and_tags_fit_wandbs_limits():
    run_id = trackers.wandb_run_id("a" * 200 + ":/#", "012_" + "b" * 100)
    assert len(run_id) <= 64 and "-012-" in run_id
    assert not set(run_id) & set(":;,#?/'")
    tags = trackers.wandb_tags({"x.y.reward_kwargs": "[1,2]", "k": "v" * 100})
    assert tags[0] == "reward_kwargs=[1;2]" and len(tags[1]) == trackers.TAG_MAX


def test_an_unknown_wandb_mode_is_refused_before_submission(base):
    spec = point(base, 0, {}, ["runtime.wandb_mode=offlne"])
    (problem,) = [p for p in check_runtime(spec) if p.key == "runtime.wandb_mode"]
    assert "offlne" in problem.message and "offline" in problem.fix
    with pytest.raises(ValueError, match="runtime.wandb_mode"):
        trackers.environment(spec)


@pytest.mark.parametrize("given", ["wandb", "[console,wandb]", "['console', 'tensorboard']", "[]"])
def test_the_job_reads_the_loggers_the_checks_before_submission_read(base, given):
    """One reader of verl's trainer.logger (grpokit.config.point.logger_backends): the checks before
    submission (grpokit.validate.job_needs, on verl's composed config of the point) and the job (the
    emitted override) name the same backends: the user's, with verl's file logger added."""
    from grpokit.config.point import logger_backends
    from grpokit.validate import job_needs, verl_check

    overrides = [*base, f"verl.trainer.logger={given}"]
    cfg = compose_kit(overrides)
    spec = build_point(cfg, index=0, kit_overrides=overrides, swept={})
    verl_cfg, problems = verl_check.compose_point(spec)
    assert verl_cfg is not None, problems
    user = logger_backends(cfg.verl.trainer.logger)
    assert job_needs._loggers(verl_cfg) == spec.loggers() == [*user, *(["file"] if "file" not in user else [])]
    assert ("wandb" in spec.loggers()) == ("WANDB_RUN_ID" in trackers.environment(spec))


def test_logger_backends_takes_what_verls_tracking_takes():
    from omegaconf import OmegaConf

    from grpokit.config.point import logger_backends

    assert logger_backends(None) == []
    assert logger_backends("wandb") == ["wandb"]
    assert logger_backends(("console", "wandb")) == ["console", "wandb"]
    assert logger_backends(OmegaConf.create({"x": ["console"]}).x) == ["console"]

"""The kit always keeps verl's file logger, whatever ``verl.trainer.logger`` says (issue 12 item 8).

The point is built from the real kit config, composed by verl's own schema (``validate_point``),
and the resulting ``trainer.logger`` is handed to verl's own ``Tracking``, which must write the
point's ``metrics.jsonl`` at ``$VERL_FILE_LOGGER_PATH``.
"""

from __future__ import annotations

import json

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point, with_file_logger
from grpokit.runtime.processes import trainer
from grpokit.validate import validate_point


def point(overrides: list[str]):
    return build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})


def logger_overrides(spec) -> list[str]:
    return [o for o in spec.verl_overrides if o.split("=", 1)[0] == "trainer.logger"]


@pytest.mark.parametrize(
    ("user_value", "expected", "shown"),
    [
        ("['console','wandb']", ["console", "wandb", "file"], "[console,wandb]"),  # verl's example scripts
        ("console", ["console", "file"], "console"),  # verl's Tracking also takes one string
        ("[]", ["file"], "[]"),
    ],
)
def test_file_is_added_to_the_users_loggers_and_said_once(base, tmp_path, monkeypatch, user_value, expected, shown):
    # a user of verl's scripts (wandb online) has a W&B key, which the kit checks before submission
    monkeypatch.setenv("WANDB_API_KEY", "a-users-key")
    spec = point([*base, f"verl.trainer.logger={user_value}"])
    override = f"trainer.logger=[{','.join(expected)}]"
    assert logger_overrides(spec) == [override]  # once, in the recorded point
    assert override in trainer.command(spec, [])  # and in the verl command the job runs
    (notice,) = spec.notices
    assert notice.startswith(f"verl.trainer.logger={shown} leaves out verl's file logger; the kit adds it")
    assert "metrics.jsonl" in notice

    cfg, problems = validate_point(spec)  # verl's own composition of the point's overrides
    assert problems == [] and list(cfg.trainer.logger) == expected

    from verl.utils.tracking import Tracking

    path = tmp_path / "attempt" / "metrics.jsonl"
    path.parent.mkdir()
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    monkeypatch.setenv("WANDB_MODE", "disabled")  # no network here (tests/unit/test_trackers.py: the job's W&B env)
    tracking = Tracking("unit", "000", default_backend=list(cfg.trainer.logger))
    tracking.log({"critic/score/mean": 0.5}, step=1)
    tracking.logger["file"].finish()
    assert json.loads(path.read_text()) == {"step": 1, "data": {"critic/score/mean": 0.5}}


def test_verls_default_logger_gets_file_too(base):
    # a user who sets verl's default back (or an experiment that leaves it) is not emitted as a change
    spec = point([*base, "verl.trainer.logger=[console,wandb]"])
    assert logger_overrides(spec) == ["trainer.logger=[console,wandb,file]"]


def test_a_logger_list_with_file_is_left_alone(base):
    spec = point(base)  # configs/config.yaml: [console, tensorboard, file]
    assert logger_overrides(spec) == ["trainer.logger=[console,tensorboard,file]"] and spec.notices == []
    spec = point([*base, "verl.trainer.logger=[file,wandb]"])
    assert logger_overrides(spec) == ["trainer.logger=[file,wandb]"] and spec.notices == []


def test_with_file_logger_on_plain_values():
    assert with_file_logger(None) == (["file"], with_file_logger(None)[1])
    assert with_file_logger("file") == (["file"], None)
    assert with_file_logger(("console",))[0] == ["console", "file"]

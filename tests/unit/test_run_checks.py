"""Types from verl's dataclasses, the kit's presets yielding to a typed key, and the run-time checks
made before submission (issue 23). verl's composed config of a real kit point; the environment's
installed engines are passed in where the test decides them (``check_engine(installed=...)``)."""

from __future__ import annotations

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.explicit import yield_presets
from grpokit.config.point import build_point
from grpokit.config.verl_types import declared, kinds
from grpokit.validate import SweepValidationError, validate_point
from grpokit.validate.command_line import check
from grpokit.validate.run_checks import check_engine, check_resume_contract
from grpokit.validate.verl_registries import registries

ARR = "verl.actor_rollout_ref"


@pytest.fixture(autouse=True)
def own_notes(monkeypatch):
    """Notes said here (once per process) are not taken from later tests that expect to see them."""
    from grpokit import problems

    monkeypatch.setattr(problems, "_SAID", set())


def point(overrides: list[str]):
    return build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})


def keys(problems) -> list[str]:
    return [p.key for p in problems]


def test_annotations_read_as_the_values_they_allow():
    assert kinds("float") == {"float"}
    assert kinds("Optional[int]") == {"int", "none"}
    assert kinds("int | None") == {"int", "none"}
    assert kinds("Literal['a', 'b']") == {"str"}
    assert kinds("dict[str, Any]") == {"dict"} and kinds("Any") == {"any"} and kinds("PolicyLossConfig") == {"any"}


def test_verl_keys_are_typed_by_verls_dataclasses_not_by_yaml_defaults():
    types = declared()
    # verl's YAML writes 0 for entropy_coeff; ActorConfig declares a float
    assert types["actor_rollout_ref.actor.entropy_coeff"] == "float"
    assert kinds(types["actor_rollout_ref.actor.ppo_micro_batch_size"]) == {"int", "none"}
    assert types["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "int"
    floats = [
        f"{ARR}.actor.entropy_coeff=0.001",
        f"{ARR}.rollout.top_p=0.9",
        f"{ARR}.rollout.val_kwargs.temperature=0.6",
        f"{ARR}.rollout.over_sample_rate=0.1",
    ]
    assert check(floats)[1] == []
    _, problems = check([f"{ARR}.rollout.tensor_model_parallel_size=1.5", f"{ARR}.actor.entropy_coeff=abc"])
    assert keys(problems) == [f"{ARR}.rollout.tensor_model_parallel_size", f"{ARR}.actor.entropy_coeff"]
    assert "declares int" in problems[0].message and "declares float" in problems[1].message


def test_a_typed_global_micro_batch_wins_over_the_profiles_per_gpu_twin(base):
    spec = point([*base, f"{ARR}.actor.ppo_micro_batch_size=8"])
    assert "actor_rollout_ref.actor.ppo_micro_batch_size=8" in spec.verl_overrides
    assert not any(o.startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=") for o in spec.verl_overrides)
    assert any("yours wins" in n for n in spec.notices)
    assert validate_point(spec)[1] == []
    # both typed: the user set both, and verl's refusal stands
    emitted = ["a.ppo_micro_batch_size_per_gpu=1"]
    typed = {
        "actor_rollout_ref.actor.ppo_micro_batch_size": "8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "2",
    }
    assert yield_presets(emitted, typed) == (emitted, [])
    _, problems = validate_point(
        point([*base, f"{ARR}.actor.ppo_micro_batch_size=8", f"{ARR}.actor.ppo_micro_batch_size_per_gpu=2"])
    )
    assert "You have set both" in problems[0].message


@pytest.mark.parametrize(
    ("override", "key"),
    [
        (f"{ARR}.rollout.tensor_model_parallel_size=2", f"{ARR}.rollout.tensor_model_parallel_size"),
        (
            f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size=2",
            f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size",
        ),
        (f"{ARR}.model.lora_adapter_path=/nonexistent/adapter", f"{ARR}.model.lora_adapter_path"),
        ("verl.reward.custom_reward_function.path=/nonexistent/reward.py", "verl.reward.custom_reward_function.path"),
        ("verl.algorithm.adv_estimator=gpro", "verl.algorithm.adv_estimator"),
        ("verl.reward.reward_manager.name=naiv", "verl.reward.reward_manager.name"),
        (f"{ARR}.rollout.gpu_memory_utilization=1.5", f"{ARR}.rollout.gpu_memory_utilization"),
        (f"{ARR}.actor.ppo_micro_batch_size_per_gpu=128", f"{ARR}.actor.ppo_micro_batch_size_per_gpu"),
        ("verl.trainer.default_local_dir=/etc/hostname/ckpt", "verl.trainer.default_local_dir"),
    ],
)
def test_what_would_die_on_the_gpu_is_refused_on_the_key_typed(base, override, key):
    # the kit's point: one GPU, batch 8 x n 8 (mini batch per GPU 64)
    _, problems = validate_point(point([*base, override]))
    assert keys(problems) == [key] and problems[0].fix
    assert "\n" not in str(problems[0])


def test_the_run_time_checks_pass_what_fits(base):
    fits = [
        "cluster.gpus_per_node=4",
        f"{ARR}.rollout.tensor_model_parallel_size=2",
        f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size=4",
        f"{ARR}.actor.ppo_micro_batch_size_per_gpu=16",
        "verl.algorithm.adv_estimator=rloo",
        f"{ARR}.actor.policy_loss.loss_mode=gspo",
    ]
    assert validate_point(point([*base, *fits]))[1] == []


def test_verls_registries_are_read_from_verl():
    names = registries()
    assert {"grpo", "gae", "rloo"} <= set(names["adv_estimator"]) and "vanilla" in names["policy_loss"]
    assert "naive" in names["reward_manager"] and {"vllm", "sglang"} <= set(names["rollout"])


def test_an_engine_the_jobs_environment_lacks_is_refused(base, capsys):
    spec = point([*base, f"{ARR}.rollout.name=sglang"])
    cfg, _ = validate_point(spec)
    problems = check_engine(spec, cfg, installed=lambda package: package == "vllm")
    assert (
        keys(problems) == [f"{ARR}.rollout.name"] and "set verl.actor_rollout_ref.rollout.name=vllm" in problems[0].fix
    )
    assert check_engine(spec, cfg, installed=lambda package: package in ("vllm", "sglang")) == []
    # no engine at all here (a login node): left to the job, said once
    assert check_engine(spec, cfg, installed=lambda package: False) == []
    assert "checked by the job" in capsys.readouterr().err


def test_a_null_batch_is_reported_on_the_key_typed(base):
    with pytest.raises(SweepValidationError) as err:
        point([*base, "verl.data.train_batch_size=null"])
    assert keys(err.value.problems) == ["verl.data.train_batch_size"]


def test_the_requeue_contract_on_slurm(base, capsys):
    spec = point([*base, "cluster=slurm", "verl.trainer.resume_mode=disable", "verl.trainer.save_freq=-1"])
    cfg, _ = validate_point(spec)
    problems = check_resume_contract(spec, cfg)
    assert keys(problems) == ["verl.trainer.resume_mode"] and "step 0" in problems[0].message
    assert "saves no checkpoint" in capsys.readouterr().err
    local = point([*base, "verl.trainer.resume_mode=disable"])  # never requeued: the reference run sets it
    assert check_resume_contract(local, validate_point(local)[0]) == []

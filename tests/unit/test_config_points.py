"""The kit's config tree over verl's schema: composition, derived settings, overrides, validation."""

from __future__ import annotations

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.overrides import format_value
from grpokit.config.point import build_point, point_name
from grpokit.validate import validate_point
from grpokit.validate.verl_check import check_command_line


def point(overrides: list[str]):
    return build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})


def emitted(spec) -> dict[str, str]:
    return {o.lstrip("+").split("=", 1)[0]: o.split("=", 1)[1] for o in spec.verl_overrides}


def test_defaults_are_the_reference_runs_settings(base):
    spec = point(base)
    cfg, problems = validate_point(spec)  # verl's own config, composed with the point's overrides
    assert problems == []
    assert cfg.data.train_batch_size == 8 and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.data.max_prompt_length == 512 and cfg.data.max_response_length == 1024
    assert cfg.data.train_max_samples == 1024 and cfg.data.val_max_samples == 256
    assert cfg.trainer.total_training_steps == 48 and cfg.trainer.save_freq == 24 and cfg.trainer.test_freq == 12
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert actor.optim.lr == 1e-6 and actor.kl_loss_coef == 0.01 and actor.kl_loss_type == "low_var_kl"
    assert actor.use_kl_loss and actor.entropy_coeff == 0 and actor.strategy == "fsdp2"
    assert rollout.name == "vllm" and rollout.max_num_seqs == 64 and rollout.max_model_len == 1792
    assert rollout.gpu_memory_utilization == 0.9 and rollout.enable_chunked_prefill and rollout.free_cache_engine
    assert rollout.max_num_batched_tokens == 8192 and rollout.engine_kwargs.vllm.limit_mm_per_prompt.image == 0
    assert actor.ppo_max_token_len_per_gpu == 2048 and actor.ppo_micro_batch_size_per_gpu == 1
    assert actor.fsdp_config.param_offload and actor.fsdp_config.optimizer_offload
    model = cfg.actor_rollout_ref.model
    assert not model.use_remove_padding and model.enable_gradient_checkpointing
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "eager"
    assert list(cfg.trainer.logger) == ["console", "tensorboard", "file"]
    assert "+actor_rollout_ref.model.override_config.attn_implementation=eager" in spec.verl_overrides


def test_derived_settings_follow_the_swept_ones_and_an_explicit_value_wins(base):
    v = emitted(
        point(
            [
                *base,
                "verl.data.train_batch_size=16",
                "verl.actor_rollout_ref.rollout.n=4",
                "verl.data.max_response_length=2048",
            ]
        )
    )
    assert v["actor_rollout_ref.rollout.max_num_seqs"] == "64"
    assert v["actor_rollout_ref.rollout.max_model_len"] == str(512 + 2048 + 256)
    assert v["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == "3072"
    assert v["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"] == "3072"
    assert v["actor_rollout_ref.actor.ppo_mini_batch_size"] == "16"
    v = emitted(point([*base, "verl.data.train_batch_size=16", "verl.actor_rollout_ref.rollout.max_num_seqs=100"]))
    assert v["actor_rollout_ref.rollout.max_num_seqs"] == "100"


@pytest.mark.parametrize("hardware", ["consumer_24gb", "h200"])
def test_hardware_profiles_validate(base, hardware):
    spec = point([*base, f"hardware={hardware}"])
    _, problems = validate_point(spec)
    assert problems == []


def test_h200_profile_undoes_the_consumer_memory_savings(base):
    cfg, _ = validate_point(point([*base, "hardware=h200"]))
    actor = cfg.actor_rollout_ref.actor
    assert not actor.fsdp_config.param_offload and not actor.fsdp_config.optimizer_offload
    # at least 2 whole sequences per micro batch (the measured memory bound, docs/performance.md)
    assert actor.use_dynamic_bsz and actor.ppo_max_token_len_per_gpu >= 2 * 1536
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"


def test_validation_names_point_key_and_fix(base):
    problems = validate_point(point([*base, "verl.actor_rollout_ref.rollout.max_model_len=1000"]))[1]
    assert [p.key for p in problems] == ["verl.actor_rollout_ref.rollout.max_model_len"]
    assert "1536" in problems[0].message and ">=1536" in problems[0].fix
    problems = validate_point(point([*base, "verl.actor_rollout_ref.actor.ppo_mini_batch_size=32"]))[1]
    assert any("ppo_mini_batch_size" in p.key or "mini" in p.message for p in problems)
    problems = validate_point(point([*base, "experiment.data_dir=/nonexistent"]))[1]
    assert {p.key for p in problems} == {"verl.data.train_files", "verl.data.val_files"}
    assert "prepare_data.py gsm8k" in problems[0].fix
    problems = validate_point(point([*base, "model.path=/nonexistent"]))[1]
    assert [p.key for p in problems] == ["model.path"] and "make_tiny_model.py --out /nonexistent" in problems[0].fix
    problems = validate_point(point([*base, "model=qwen3_5_0_8b", "model.path=/nonexistent"]))[1]
    assert [p.key for p in problems] == ["model.path"] and "download.py model=qwen3_5_0_8b" in problems[0].fix


def test_signal_lead_must_fit_the_time_limit(base):
    problems = validate_point(point([*base, "cluster=slurm", "cluster.timeout_min=5", "cluster.signal_delay_s=600"]))[1]
    assert [p.key for p in problems] == ["cluster.signal_delay_s"]


def test_command_line_typos_get_a_suggestion_not_hydras_append_hint():
    problems = check_command_line(
        [
            "verl.data.train_bach_size=16",
            "verl.data.train_batch_size=8,16",
            "+verl.actor_rollout_ref.model.override_config.attn_implementation=sdpa",
            "+verl.trainer.totl_training_steps=3",
        ]
    )
    assert [p.key for p in problems] == ["verl.data.train_bach_size", "verl.trainer.totl_training_steps"]
    assert "did you mean verl.data.train_batch_size" in problems[0].fix


def test_format_value_speaks_hydras_override_grammar():
    assert format_value(["console", "tensorboard"]) == "[console,tensorboard]"
    assert format_value(None) == "null" and format_value(True) == "true" and format_value(1e-6) == "1e-06"
    assert format_value("/a/b.parquet") == "/a/b.parquet"
    assert format_value("a b,c") == "'a b,c'" and format_value("null") == "'null'"


def test_point_names_carry_the_swept_values():
    assert (
        point_name(3, {"verl.data.train_batch_size": "16", "verl.actor_rollout_ref.rollout.n": "4"})
        == "003_train_batch_size-16__n-4"
    )
    assert point_name(0, {}) == "000"


def test_fast_override_path_equals_hydras_full_composition(base):
    from omegaconf import OmegaConf

    from grpokit.config.verl_schema import apply_overrides, compose_verl

    overrides = point([*base, "hardware=h200", "verl.data.train_batch_size=16"]).verl_overrides
    fast, full = apply_overrides(overrides), compose_verl(overrides)
    assert OmegaConf.to_container(fast, resolve=False) == OmegaConf.to_container(full, resolve=False)
    with pytest.raises(Exception, match="Could not override 'data.train_bach_size'"):
        apply_overrides(["data.train_bach_size=3"])


def test_points_derived_from_the_first_equal_their_full_composition(base):
    from omegaconf import OmegaConf

    from grpokit.submit.points import point_loader

    points = [[*base, f"verl.data.train_batch_size={b}", f"+runtime.env.PROFILE={p}"] for b, p in ((8, "a"), (16, "b"))]
    points.append([*base, "verl.data.train_batch_size=8", "+runtime.env.PROFILE=c", "hardware=h200"])
    load = point_loader(compose_kit, points[0])
    for overrides in points:
        fast, full = (OmegaConf.to_container(c, resolve=False) for c in (load(overrides), compose_kit(overrides)))
        fast.pop("hydra"), full.pop("hydra")  # Hydra's own bookkeeping (the override list) differs
        assert fast == full


@pytest.mark.parametrize("experiment", ["gsm8k_grpo", "memalpha_grpo", "memalpha_grpo_full", "tool_memory_grpo"])
def test_raw_leaves_reads_what_omegaconf_gives(base, experiment):
    # verl_overrides reads the raw leaves of verl's tree once per point through its own walk;
    # it must give what OmegaConf's to_container gives, for every shipped experiment and for the
    # node kinds verl's tree holds: {}, None, ???, a list, and a mapping or list that is an interpolation.
    from omegaconf import OmegaConf

    from grpokit.config.overrides import raw_leaves
    from grpokit.config.verl_schema import verl_base

    def _leaves(node, prefix=""):  # OmegaConf's own reading, flattened: the reference
        if isinstance(node, dict) and node:
            for key, value in node.items():
                yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield prefix[:-1], node

    cfg = compose_kit([*base, f"experiment={experiment}"])
    assert raw_leaves(cfg.verl) == dict(_leaves(OmegaConf.to_container(cfg.verl, resolve=False)))
    assert raw_leaves(verl_base()) == dict(_leaves(OmegaConf.to_container(verl_base(), resolve=False)))
    odd = OmegaConf.create(
        {"a": {}, "b": None, "c": "???", "d": [1, {"x": "${a}"}], "e": {"f": "${b}", "g": [2]}, "h": "${e}"}
    )
    odd.i = OmegaConf.create({"j": 1})
    OmegaConf.update(odd, "i", "${a}", merge=False)  # a mapping node replaced by an interpolation
    assert raw_leaves(odd) == dict(_leaves(OmegaConf.to_container(odd, resolve=False)))

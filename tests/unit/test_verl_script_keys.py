"""A verl user's own launch script through the kit (issue 34), judged against the installed verl 0.9.1.

1. verl's legacy reward keys (``reward_model.*``, ``custom_reward_function.*``, ``sandbox_fusion.*``),
   which only verl's fully-async entry point translates and ``main_ppo`` ignores, are refused with the
   key verl reads; the table is verl's own translation, checked here against verl's function itself.
2. Fix hints come from verl's keys and renames and the path typed, never a guess across meanings.
3. The experiment preset's step count never makes the kit bend a key the user typed.
4. ``critic.*`` keys under the preset's GRPO (no critic) are refused with the fix.

Real verl composition (the kit's cached template), real GSM8K parquet, the tiny model.
"""

from __future__ import annotations

import ast
import contextlib
import io
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from grpokit.config import verl_legacy
from grpokit.config.compose import compose_kit
from grpokit.config.key_hints import hints, misspelt
from grpokit.config.point import build_point
from grpokit.config.verl_schema import apply_overrides, lean_imports, verl_config_dir
from grpokit.problems import Problem
from grpokit.validate import SweepValidationError, validate_point
from grpokit.validate.command_line import check
from grpokit.validate.verl_check import suggest


def kit(base: list[str], *typed: str) -> list[Problem]:
    """The kit on a command line: the command-line check, the point, every validation of the point."""
    argv, problems = check([*base, *typed])
    if problems:
        return problems
    try:
        spec = build_point(compose_kit(argv), index=0, kit_overrides=list(typed), swept={})
    except SweepValidationError as err:
        return err.problems
    return validate_point(spec)[1]


def about(problems: list[Problem], key: str) -> list[Problem]:
    return [p for p in problems if p.key == key]


# --- 1. verl's legacy reward keys ------------------------------------------------------------------


def verl_migration():
    """verl's own ``migrate_legacy_reward_impl`` (imported: Ray, torch), as its fully-async entry point runs it."""
    lean_imports()
    from verl.experimental.reward_loop import migrate_legacy_reward_impl

    return migrate_legacy_reward_impl


def test_the_table_is_verls_translation_key_by_key():
    """Every legacy key set on verl's complete composed config (each its own value: some move only
    with another, ``reward_loop_module_path`` with ``reward_loop_source``) lands, by verl's imported
    function, where the table says; a key the table maps nowhere is dropped by verl."""
    migrate = verl_migration()
    table = verl_legacy.read_table()
    assert table["reward_model.reward_manager"] == "reward.reward_manager.name"
    assert table["reward_model.model.path"] == "reward.reward_model.model_path"
    assert table["reward_model.rollout"] == "reward.reward_model.rollout"
    assert table["custom_reward_function"] == "reward.custom_reward_function"
    leaves = {k: v for k, v in table.items() if k in _legacy_leaves() or k == "reward_model.reward_kwargs"}
    assert set(_legacy_leaves()) <= set(leaves), "every legacy key of verl's YAML is in the table"
    cfg = apply_overrides([])
    with open_dict(cfg):
        for i, key in enumerate(leaves):
            OmegaConf.update(cfg, key, f"probe-{i}", force_add=True)
        migrated = migrate(cfg)
    text = OmegaConf.to_yaml(migrated)
    for i, (key, new) in enumerate(leaves.items()):
        if new:
            assert OmegaConf.select(migrated, new) == f"probe-{i}", (key, new)
        else:  # read nowhere: verl drops it with its section
            assert f"probe-{i}\n" not in text, key


def _legacy_leaves() -> list[str]:
    base = apply_overrides([])
    return [
        k
        for section in verl_legacy.sections()
        for k in (f"{section}.{leaf}" for leaf in _leaves(OmegaConf.to_container(base[section])))
    ]


def _leaves(node, prefix=""):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_main_ppo_reads_none_of_the_legacy_sections():
    """The premise, from verl's source: main_ppo and its trainer never read ``config.<legacy section>``."""
    root = verl_config_dir().parent.parent
    sections = set(verl_legacy.sections())
    assert sections == {"reward_model", "custom_reward_function", "sandbox_fusion"}
    for file in ("trainer/main_ppo.py", "trainer/ppo/ray_trainer.py", "trainer/ppo/reward.py"):
        for node in ast.walk(ast.parse((root / file).read_text())):
            if isinstance(node, ast.Attribute) and node.attr in sections:
                inner = node.value
                assert not (isinstance(inner, ast.Name) and inner.id == "config"), f"{file} reads config.{node.attr}"


@pytest.mark.parametrize(
    ("typed", "key", "fix"),
    [
        ("verl.reward_model.reward_manager=dapo", "verl.reward_model.reward_manager", "reward_manager.name=dapo"),
        ("verl.reward_model.enable=true", "verl.reward_model.enable", "verl.reward.reward_model.enable=true"),
        ("verl.reward_model.model.path=/m/rm", "verl.reward_model.model.path", "reward.reward_model.model_path=/m/rm"),
        (
            "verl.reward_model.rollout.gpu_memory_utilization=0.3",
            "verl.reward_model.rollout.gpu_memory_utilization",
            "verl.reward.reward_model.rollout.gpu_memory_utilization=0.3",
        ),
        ("verl.custom_reward_function.name=score", "verl.custom_reward_function.name", "reward.custom_reward_function"),
        ("verl.sandbox_fusion.url=http://sb:8080", "verl.sandbox_fusion.url", "verl.reward.sandbox_fusion.url="),
        (
            "+verl.reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
            "verl.reward_model.reward_kwargs.overlong_buffer_cfg.enable",
            "+verl.reward.reward_kwargs.overlong_buffer_cfg.enable=true",
        ),
        ("verl.reward_model.model.trust_remote_code=true", "verl.reward_model.model.trust_remote_code", "drop"),
    ],
)
def test_a_legacy_reward_key_is_refused_naming_the_key_verl_reads(base, typed, key, fix):
    problems = about(kit(base, typed), key)
    assert len(problems) == 1, [str(p) for p in kit(base, typed)]
    (p,) = problems
    assert fix in p.fix
    assert "main_ppo ignores it" in p.message or "in no entry point" in p.message


def test_a_legacy_reward_manager_name_is_checked_against_verls_registry(base):
    (p,) = about(kit(base, "verl.reward_model.reward_manager=no_such"), "verl.reward_model.reward_manager")
    assert "verl registers no reward manager 'no_such'" in p.message
    assert "set verl.reward.reward_manager.name to one of" in p.fix and "dapo" in p.fix
    (q,) = about(kit(base, "verl.reward.reward_manager.name=no_such"), "verl.reward.reward_manager.name")
    assert "no_such" in q.message


def test_the_keys_verl_reads_are_accepted(base):
    assert kit(base, "verl.reward.reward_manager.name=dapo", "+verl.reward.reward_kwargs.max_resp_len=1024") == []


# --- 2. fix hints ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "meant", "not_meant"),
    [
        (
            "actor_rollout_ref.rollout.val_temperature",
            "actor_rollout_ref.rollout.val_kwargs.temperature",
            "rollout.temperature?",
        ),
        ("actor_rollout_ref.rollout.n_val", "actor_rollout_ref.rollout.val_kwargs.n", "rollout.n?"),
        ("data.train_bach_size", "data.train_batch_size", "val_batch_size"),
        ("trainer.totl_training_steps", "trainer.total_training_steps", "total_epochs"),
        ("data.max_prompt_len", "data.max_prompt_length", "prompt_key"),
        ("actor_rollout_ref.rolout.n", "actor_rollout_ref.rollout.n", "rollout.name"),
        ("reward_model.reward_kwargs.x", "reward.reward_kwargs.x", None),  # verl's own rename
    ],
)
def test_a_hint_comes_from_verls_keys_and_the_words_typed_never_a_guess_across_meanings(typed, meant, not_meant):
    text = suggest(typed)
    assert f"verl.{meant}" in text
    if not_meant:
        assert not_meant not in text


def test_no_hint_when_nothing_verl_declares_fits():
    assert "did you mean" not in suggest("trainer.foo_bar")
    assert hints("rollout.temp_scale", ["rollout.temperature", "rollout.scale_x"]) == []


def test_key_hint_rules_on_plain_names():
    assert misspelt("cluster.partiton", "cluster.partition") and misspelt("max_timeout_requeue", "max_timeout_requeues")
    assert not misspelt("rollout.n", "rollout.name") and not misspelt("train_bach_size", "val_batch_size")
    known = ["a.rollout.temperature", "a.rollout.val_kwargs.temperature", "a.actor.optim.lr"]
    assert hints("a.actor.temperature", known) == ["a.rollout.temperature", "a.rollout.val_kwargs.temperature"]
    assert hints("a.actor.lr", known) == ["a.actor.optim.lr"]
    assert hints("old.x.y", known, {"old.x": "new.z"}) == ["new.z.y"]


def test_a_missing_model_folder_typed_as_verls_key_is_named_as_typed(base):
    problems = kit(base, "verl.actor_rollout_ref.model.path=/nonexistent/Qwen2-7B")
    (p,) = about(problems, "verl.actor_rollout_ref.model.path")
    assert "/nonexistent/Qwen2-7B" in p.message and "--local-dir /nonexistent/Qwen2-7B" in p.fix
    assert "make_tiny_model" not in p.fix and not about(problems, "model.path")


def test_a_missing_train_file_typed_names_the_folder_typed(base, tmp_path):
    mine = tmp_path / "mydata" / "gsm8k"
    (p,) = about(kit(base, f"verl.data.train_files={mine}/train.parquet"), "verl.data.train_files")
    assert p.fix.endswith(f"prepare_data.py gsm8k --out {mine}")
    (q,) = about(kit(base, f"verl.data.train_files={mine}/my_train.parquet"), "verl.data.train_files")
    assert f"check verl.data.train_files={mine}/my_train.parquet" in q.fix
    # a verl script's own data (experiment=verl_script): no prepare command for a task the kit has none of
    own = [a for a in base if not a.startswith("experiment.")] + ["experiment=verl_script"]
    (r,) = about(kit(own, f"verl.data.train_files={mine}/train.parquet"), "verl.data.train_files")
    assert r.fix == f"put the data file at {mine}/train.parquet, or set verl.data.train_files to an existing file"


# --- 3. the preset's step count ------------------------------------------------------------------


#: verl's examples/grpo_trainer/run_qwen2-7b.sh: an epoch-based run (no total_training_steps).
EPOCH_SCRIPT = ("verl.data.train_batch_size=1024", "verl.trainer.total_epochs=15")


def test_a_verl_epoch_script_is_never_told_to_change_what_it_typed(base):
    (p,) = about(kit(base, *EPOCH_SCRIPT), "verl.trainer.total_training_steps")
    assert "the experiment preset gsm8k_grpo sets verl.trainer.total_training_steps=48" in p.fix
    assert "verl.data.train_max_samples=1024" in p.fix and "(not typed)" in p.fix
    assert "set verl.trainer.total_training_steps=null" in p.fix and "total_epochs=15 over the data: 15 steps" in p.fix
    assert "total_epochs>=" not in p.fix and "train_max_samples>=" not in p.fix
    # the fix taken: verl's own step count stands, the data check has nothing to say
    fixed = kit(base, *EPOCH_SCRIPT, "verl.trainer.total_training_steps=null", "verl.data.train_max_samples=-1")
    assert about(fixed, "verl.trainer.total_training_steps") == []


def test_a_typed_step_count_keeps_every_fix(base):
    (p,) = about(kit(base, "verl.trainer.total_training_steps=200"), "verl.trainer.total_training_steps")
    assert "verl.data.train_max_samples>=1600" in p.fix and "verl.trainer.total_epochs>=2" in p.fix
    assert "sets verl.data.train_max_samples=1024 (not typed)" in p.fix and "total_training_steps=48" not in p.fix


# --- 4. keys the preset's algorithm ignores --------------------------------------------------------


PPO_STYLE = ("verl.critic.optim.lr=1e-5", "verl.critic.ppo_micro_batch_size_per_gpu=2")


def test_critic_keys_under_the_presets_grpo_are_refused_with_the_fix(base):
    problems = kit(base, *PPO_STYLE)
    (p,) = about(problems, "verl.critic.optim.lr")
    assert "algorithm.adv_estimator=grpo" in p.message and "critic.ppo_micro_batch_size_per_gpu" in p.message
    assert "no critic" in p.message and "set verl.algorithm.adv_estimator=gae to train a critic" in p.fix
    assert len([q for q in problems if q.key.startswith("verl.critic.")]) == 1  # one line, not one per key


def test_critic_keys_with_a_chosen_algorithm_are_left_to_verl(base, tiny_model_dir):
    model = f"verl.critic.model.path={tiny_model_dir}"
    for typed in (
        [*PPO_STYLE, model, "verl.algorithm.adv_estimator=gae"],
        [*PPO_STYLE, model, "verl.critic.enable=true"],
        [*PPO_STYLE, "verl.algorithm.adv_estimator=rloo"],  # typed: the user's choice, verl's own warning
    ):
        problems = kit(base, *typed)
        assert not [p for p in problems if "need_critic" in p.message], [str(p) for p in problems]


def test_need_critic_is_verls_own_answer(base):
    """What the refusal rests on: verl's need_critic on the point's composed config."""
    lean_imports()
    from verl.trainer.ppo.utils import need_critic

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        assert not need_critic(apply_overrides(["algorithm.adv_estimator=grpo", "critic.optim.lr=1e-5"]))
        assert need_critic(apply_overrides(["algorithm.adv_estimator=gae"]))


def test_the_legacy_table_is_kept_per_install(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE_DIR", str(tmp_path))
    verl_legacy.table.cache_clear()
    try:
        assert verl_legacy.table() == verl_legacy.read_table()
        assert len(list(Path(tmp_path).glob("verl_legacy-*.json"))) == 1
    finally:
        verl_legacy.table.cache_clear()

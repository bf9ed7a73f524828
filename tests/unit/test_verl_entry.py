"""A verl script's own config and entry (issue 34, items 4 and 5): Megatron's ``ppo_megatron_trainer``
and a recipe's entry module with its config folder, composed with verl's own Hydra composition and
checked with verl's ``validate_config``; every refusal one line.

The recipe is the kit's own toy recipe in verl-recipe's layout (``tests/data/toy_recipe``, README.md):
its ``toy_trainer.yaml`` extends verl's ``ppo_trainer`` with keys of its own (``toy.*``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grpokit.config.verl_entry import Entry, ScriptError, hydra_main_defaults, locate
from grpokit.config.verl_schema import MEGATRON_CONFIG_NAME, VerlConfigRef, compose_verl, use, verl_config_dir
from grpokit.config.verl_script import VerlInvocation, expand_argv, read_script

RECIPE = Path(__file__).parents[1] / "data" / "toy_recipe"
TOY_SCRIPT = RECIPE / "recipe" / "toy" / "run_toy_tiny.sh"


@pytest.fixture(autouse=True)
def _ppo_trainer_after():
    yield
    use(None)  # the process composes verl's ppo_trainer again for the next test


def inv(module: str, config_path: str | None = None, config_name: str | None = None) -> VerlInvocation:
    return VerlInvocation(module, config_path, config_name, (), "run.sh:3", {})


def test_main_ppo_composes_ppo_trainer_or_megatrons_config(tmp_path):
    script = tmp_path / "run.sh"
    assert locate(inv("verl.trainer.main_ppo"), script) == Entry()
    megatron = locate(inv("verl.trainer.main_ppo", "config", "ppo_megatron_trainer.yaml"), script)
    assert megatron == Entry(config_name=MEGATRON_CONFIG_NAME)
    assert megatron.trainer_args() == ["-m", "verl.trainer.main_ppo", "--config-name", "ppo_megatron_trainer"]
    assert megatron.kit_overrides() == [
        "verl_base@verl=ppo_megatron_trainer",
        "++verl_entry.config_name=ppo_megatron_trainer",
    ]
    same = locate(inv("verl.trainer.main_ppo", str(verl_config_dir()), "ppo_trainer"), script)
    assert same.is_default()


def test_main_ppo_refusals_are_one_line(tmp_path):
    script = tmp_path / "run.sh"
    with pytest.raises(ScriptError) as refused:
        locate(inv("verl.trainer.main_ppo", "config", "evaluation"), script)
    assert str(refused.value) == (
        f"verl_script={script}: --config-name=evaluation (run.sh:3); the kit composes verl's ppo_trainer and "
        "ppo_megatron_trainer for verl.trainer.main_ppo: use one of them"
    )
    with pytest.raises(ScriptError) as refused:
        locate(inv("verl.trainer.main_ppo", str(tmp_path), "ppo_trainer"), script)
    assert str(refused.value) == (
        f"verl_script={script}: --config-path={tmp_path} (run.sh:3) is not verl's config folder "
        f"({verl_config_dir()}); main_ppo with a config folder of its own is a recipe: run it with the "
        "recipe's entry module, or drop --config-path"
    )


def test_a_recipe_entry_is_found_from_the_script_or_recipe_root(tmp_path):
    got = locate(inv("recipe.toy.main_toy"), TOY_SCRIPT)  # the script's folders up to the checkout's root
    assert got == Entry(
        module="recipe.toy.main_toy",
        config_name="toy_trainer",  # the recipe's @hydra.main
        config_dir=str((RECIPE / "recipe" / "toy" / "config").resolve()),
        pythonpath=str(RECIPE.resolve()),
    )
    elsewhere = tmp_path / "toy.sh"
    assert locate(inv("recipe.toy.main_toy"), elsewhere, recipe_root=str(RECIPE)) == got
    assert locate(inv("recipe.toy.main_toy", "config", "toy_trainer.yaml"), elsewhere, str(RECIPE)) == got
    assert hydra_main_defaults(RECIPE / "recipe" / "toy" / "main_toy.py") == ("config", "toy_trainer")
    assert got.trainer_args() == [
        "-m",
        "recipe.toy.main_toy",
        "--config-path",
        got.config_dir,
        "--config-name",
        "toy_trainer",
    ]


def test_recipe_refusals_are_one_line(tmp_path):
    script = tmp_path / "toy.sh"
    with pytest.raises(ScriptError) as refused:
        locate(inv("recipe.toy.main_toy"), script, cwd=tmp_path)
    assert str(refused.value) == (
        f"verl_script={script}: its entry recipe.toy.main_toy (run.sh:3) is not found as recipe/toy/main_toy.py "
        f"under {tmp_path}, {tmp_path.parent}, {tmp_path.parent.parent}: pass recipe_root=<your verl-recipe "
        "checkout> on the sweep command"
    )
    with pytest.raises(ScriptError) as refused:
        locate(inv("recipe.toy.main_toy", "conf", "toy_trainer"), script, str(RECIPE))
    assert str(refused.value).startswith(
        f"verl_script={script}: config toy_trainer.yaml not found in --config-path=conf (looked in "
        f"{RECIPE.resolve() / 'recipe' / 'toy' / 'conf'}, "
    )
    assert str(refused.value).endswith(": fix --config-path in the script")
    bare = tmp_path / "mine" / "train.py"
    bare.parent.mkdir()
    bare.write_text("print('no hydra here')\n")
    with pytest.raises(ScriptError) as refused:
        locate(inv("mine.train"), script, str(tmp_path))
    assert str(refused.value) == (
        f"verl_script={script}: mine.train ({bare}) declares no @hydra.main config and the command gives "
        "no --config-path/--config-name: add them to the script's command"
    )


def test_megatron_and_recipe_configs_compose_with_verls_own_hydra():
    megatron = compose_verl(
        ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"], VerlConfigRef(MEGATRON_CONFIG_NAME)
    )
    assert megatron.actor_rollout_ref.actor.strategy == "megatron"
    assert megatron.actor_rollout_ref.actor.megatron.tensor_model_parallel_size == 2
    toy = Entry.of(
        {
            "module": "recipe.toy.main_toy",
            "config_name": "toy_trainer",
            "config_dir": str(RECIPE / "recipe" / "toy" / "config"),
        }
    )
    cfg = compose_verl(["toy.skip_uniform_groups=true"], toy.ref)
    assert cfg.toy.skip_uniform_groups is True and cfg.trainer.project_name == "grpokit-toy-recipe"
    assert "hydra" not in cfg and cfg.data.gen_batch_size == cfg.data.train_batch_size  # the recipe's interpolation
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp"  # ppo_trainer's, which the recipe extends


def test_expand_argv_selects_the_scripts_config(tmp_path):
    megatron = tmp_path / "meg.sh"
    megatron.write_text(
        "python3 -m verl.trainer.main_ppo --config-path=config --config-name='ppo_megatron_trainer.yaml' \\\n"
        "  actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 trainer.n_gpus_per_node=2\n"
    )
    argv, lines = expand_argv(["-m", f"verl_script={megatron}"], {})
    assert "verl_base@verl=ppo_megatron_trainer" in argv and "++verl_entry.config_name=ppo_megatron_trainer" in argv
    assert "verl.actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2" in argv
    assert lines[0].startswith(f"verl_script={megatron}: 2 setting(s) of verl.trainer.main_ppo (ppo_megatron_trainer)")
    argv, _ = expand_argv([f"verl_script={TOY_SCRIPT}"], {"MODEL_PATH": "/m", "HOME": "/h"})
    assert "verl_base@verl=recipe_toy_trainer" in argv and "++verl_entry.module=recipe.toy.main_toy" in argv
    assert "verl.toy.skip_uniform_groups=false" in argv
    assert "verl.data.train_files=/h/data/toy/train.parquet" in argv  # ${TRAIN_FILE:-"${HOME}/..."}
    assert read_script(TOY_SCRIPT, {"HOME": "/h"}).module == "recipe.toy.main_toy"


def toy_env(tiny_model_dir: Path, gsm8k_dir: Path) -> dict[str, str]:
    return {
        "MODEL_PATH": str(tiny_model_dir),
        "TRAIN_FILE": str(gsm8k_dir / "train.parquet"),
        "TEST_FILE": str(gsm8k_dir / "test.parquet"),
    }


def test_a_recipe_written_for_another_verl_is_refused_naming_the_import(kit, tmp_path, tiny_model_dir, gsm8k_dir):
    """The toy recipe's own module imports verl.trainer.ppo.reward.compute_reward (as recipes written for
    verl 0.7 do), which verl 0.9.1 no longer has: on a GPU node it would fail at import; here it is one
    line (verl's composition and validate_config passed)."""
    out = kit.run(
        "sweep.py",
        [f"verl_script={TOY_SCRIPT}", "dry_run=true", f"logs_root={tmp_path / 'logs'}", "sweep_name=toy"],
        env=toy_env(tiny_model_dir, gsm8k_dir),
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    reward = RECIPE / "recipe" / "toy" / "toy_reward.py"
    assert (
        f"[000] verl_script: recipe.toy.main_toy would fail at import on the node: {reward.resolve()}:8 imports "
        "verl.trainer.ppo.reward.compute_reward, which verl 0.9.1 (installed) does not have" in out.stderr
    )


def test_a_recipe_is_rehearsed_with_its_config(kit, tmp_path, tiny_model_dir, gsm8k_dir):
    """rehearse=true: the kit's stand-in trainer runs in the recipe's place, given the recipe's config
    flags (it composes the recipe's config as the entry would) and the same overrides."""
    out = kit.run(
        "sweep.py",
        [
            f"verl_script={TOY_SCRIPT}",
            "rehearse=true",
            "dry_run=true",
            f"logs_root={tmp_path / 'logs'}",
            "sweep_name=toy",
        ],
        env=toy_env(tiny_model_dir, gsm8k_dir),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = (tmp_path / "logs" / "toy" / "dry_run.md").read_text()
    config = (RECIPE / "recipe" / "toy" / "config").resolve()
    assert f"grpokit.rehearsal.rehearsal_trainer \\\n  --config-path \\\n  {config} \\\n  --config-name \\\n" in text
    assert "data.gen_batch_size=8" in text and "toy.skip_uniform_groups=" not in text  # the recipe's default
    assert "| toy.skip_uniform_groups | False | script | verl's default: not passed |" in text  # provenance


def test_the_rehearsal_trainer_reads_the_recipes_config():
    from grpokit.rehearsal.rehearsal_trainer import config_defaults, split_config_args

    config = str(RECIPE / "recipe" / "toy" / "config")
    path, name, rest = split_config_args(["--config-path", config, "--config-name=toy_trainer", "a.b=1"])
    assert (path, name, rest) == (config, "toy_trainer", ["a.b=1"])
    values = config_defaults(path, name)
    assert values["trainer.project_name"] == "grpokit-toy-recipe" and values["toy.skip_uniform_groups"] == "false"
    assert values["trainer.save_freq"] == "-1" and values["data.gen_batch_size"] == values["data.train_batch_size"]
    assert config_defaults(None, None) == {}


def test_a_recipe_config_that_does_not_extend_ppo_trainer_is_refused(kit, tmp_path, tiny_model_dir, gsm8k_dir):
    recipe = tmp_path / "checkout" / "recipe" / "mine"
    (recipe / "config").mkdir(parents=True)
    (recipe / "main_mine.py").write_text(
        "import hydra\n\n\n@hydra.main(config_path='config', config_name='mine', version_base=None)\n"
        "def main(config):\n    pass\n"
    )
    (recipe / "config" / "mine.yaml").write_text("data:\n  train_batch_size: 8\n")
    script = recipe / "run_mine.sh"
    script.write_text("python3 -m recipe.mine.main_mine data.train_batch_size=4\n")
    out = kit.run("sweep.py", [f"verl_script={script}", "dry_run=true", f"logs_root={tmp_path / 'logs'}"])
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.stderr.strip() == (
        f"error: verl_script={script}: recipe.mine.main_mine's config {recipe / 'config'}/mine.yaml has no "
        "trainer.default_local_dir, which the kit sets (checkpoints, metrics, resume and its hook in verl's "
        "workers need verl's trainer keys): the kit runs recipes whose config extends verl's ppo_trainer "
        "(defaults: [ppo_trainer, _self_])"
    )
    (recipe / "config" / "mine.yaml").write_text("defaults:\n  - no_such_trainer\n  - _self_\n")
    out = kit.run("sweep.py", [f"verl_script={script}", "dry_run=true", f"logs_root={tmp_path / 'logs'}"])
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "does not compose with verl's config folder on the search path (" in out.stderr


def test_a_config_group_choice_composes_verls_config_with_it(tmp_path):
    """``model_engine=megatron`` on ``main_ppo`` with ``ppo_trainer``
    (verl's examples/ppo_trainer/run_qwen3_8b_megatron.sh) is a choice of verl's ``model_engine`` config group
    (a folder of verl's config folder), not a value: the kit composes ``ppo_trainer`` with it (Megatron's actor,
    ref and critic), and the job passes it to verl."""
    from grpokit.config.overrides import flat_base
    from grpokit.config.verl_schema import active, base_of, config_groups

    assert "model_engine" in config_groups(VerlConfigRef()) and "trainer" not in config_groups(VerlConfigRef())
    script = tmp_path / "run.sh"
    given = VerlInvocation(
        "verl.trainer.main_ppo", None, None, ("model_engine=megatron", "+model_engine.x=1", "trainer.nnodes=1"),
        "run.sh:3", {},
    )
    entry = locate(given, script)
    assert entry == Entry(groups=("model_engine=megatron",)) and not entry.is_default()
    assert entry.ref == VerlConfigRef(groups=("model_engine=megatron",))
    assert entry.ref.option == "ppo_trainer__model_engine-megatron"
    assert entry.trainer_args() == [
        "-m", "verl.trainer.main_ppo", "--config-name", "ppo_trainer", "model_engine=megatron",
    ]
    assert entry.kit_overrides() == [
        "verl_base@verl=ppo_trainer__model_engine-megatron",
        "++verl_entry.groups=['model_engine=megatron']",
    ]
    assert Entry.of({"groups": ["model_engine=megatron"]}) == entry  # point.json's list
    cfg = base_of(entry.ref)
    assert cfg.actor_rollout_ref.actor.strategy == "megatron" and cfg.critic.strategy == "megatron"
    use(entry.ref)
    assert active() == entry.ref
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size" in flat_base()
    meg = tmp_path / "meg.sh"
    meg.write_text(
        "python3 -m verl.trainer.main_ppo model_engine=megatron \\\n"
        "  actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 trainer.n_gpus_per_node=2\n"
    )
    argv, lines = expand_argv([f"verl_script={meg}"], {})
    assert "verl_base@verl=ppo_trainer__model_engine-megatron" in argv
    assert not any("model_engine" in a for a in argv if a.startswith("verl."))
    assert lines[0].startswith(f"verl_script={meg}: 2 setting(s) of verl.trainer.main_ppo (ppo_trainer model_engine=")


def test_a_bad_group_choice_is_one_line(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo model_engine=nosuch trainer.nnodes=1\n")
    with pytest.raises(ScriptError) as err:
        expand_argv([f"verl_script={script}"], {})
    assert str(err.value).startswith(f"verl_script={script}: verl's ppo_trainer does not compose with the script's ")
    assert "model_engine=nosuch" in str(err.value) and "\n" not in str(err.value)


def test_a_key_below_the_refs_interpolated_override_transformer_config_is_appended_as_verl_does():
    """verl's examples/grpo_trainer/run_qwen2-7b_math_megatron_fsdp.sh appends
    ``++...ref.megatron.override_transformer_config.gradient_accumulation_fusion``: verl's McoreEngineConfig
    declares the field ``dict[str, Any]`` (open), the ref's YAML sets it to an interpolation of the actor's."""
    from omegaconf import OmegaConf

    from grpokit.config.overrides import flat_base, verl_overrides
    from grpokit.config.verl_schema import apply_overrides
    from grpokit.config.verl_types import declared_kinds
    from grpokit.validate.verl_check import _open_parent

    use(VerlConfigRef(MEGATRON_CONFIG_NAME))
    ref_key = "actor_rollout_ref.ref.megatron.override_transformer_config"
    assert flat_base()[ref_key].startswith("${oc.select:") and "dict" in declared_kinds(ref_key)
    for section in ("actor", "ref"):
        key = f"actor_rollout_ref.{section}.megatron.override_transformer_config.gradient_accumulation_fusion"
        assert _open_parent(key, flat_base())
    assert not _open_parent("actor_rollout_ref.ref.megatron.no_such_key", flat_base())  # a closed dataclass
    cfg = OmegaConf.create({"verl": {"actor_rollout_ref": {}}})
    for section in ("actor", "ref"):
        added = {"megatron": {"override_transformer_config": {"gradient_accumulation_fusion": False}}}
        cfg.verl.actor_rollout_ref[section] = added
    overrides = [o for o in verl_overrides(cfg) if "gradient_accumulation_fusion" in o]
    assert overrides == [
        "+actor_rollout_ref.actor.megatron.override_transformer_config.gradient_accumulation_fusion=false",
        "++actor_rollout_ref.ref.megatron.override_transformer_config.gradient_accumulation_fusion=false",
    ]
    composed = apply_overrides(overrides)  # the kit's composition, as verl's own takes the script's ++
    assert composed.actor_rollout_ref.ref.megatron.override_transformer_config.gradient_accumulation_fusion is False
    verls = compose_verl(overrides)
    assert verls.actor_rollout_ref.ref.megatron.override_transformer_config.gradient_accumulation_fusion is False

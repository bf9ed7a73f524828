"""A verl launch script read without running it (grpokit.config.verl_script; issue 34, step 1).

The scripts below have the forms of verl's published ones (verl-project/verl, formerly
volcengine/verl: ``examples/grpo_trainer/run_qwen2-7b.sh`` at 03aefba4, and
``run_qwen2-7b_math_megatron.sh`` at 3f388066: ``set -x``, variables, a conditional block, a list
of files in double quotes around single quotes, ``--config-name`` with its ``.yaml``, line
continuations, ``$@``), shortened; the reading is compared with what bash passes to Python, asked
of bash itself with ``python3`` replaced by a printer of its arguments.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from grpokit.config.verl_script import ScriptError, read_script

GRPO = textwrap.dedent(
    """\
    set -x

    python3 -m verl.trainer.main_ppo \\
        data.train_files=$HOME/data/gsm8k/train.parquet \\
        data.val_files=$HOME/data/gsm8k/test.parquet \\
        data.train_batch_size=1024 \\
        actor_rollout_ref.actor.optim.lr=1e-6 \\
        actor_rollout_ref.rollout.tensor_model_parallel_size=2 \\
        actor_rollout_ref.rollout.n=5 \\
        trainer.logger=['console','wandb'] \\
        trainer.project_name='verl_grpo_example_gsm8k' \\
        trainer.n_gpus_per_node=8 \\
        trainer.total_epochs=15 $@
    """
)

MEGATRON = textwrap.dedent(
    """\
    set -x
    export CUDA_DEVICE_MAX_CONNECTIONS=1 # For megatron communication/computation overlapping

    rollout_mode="async"
    if [ "$rollout_mode" = "async" ]; then
        return_raw_chat="True"
    fi
    gsm8k_train_path=$HOME/data/gsm8k/train.parquet
    math_train_path=$HOME/data/math/train.parquet
    train_files="['$gsm8k_train_path', '$math_train_path']"
    LR=${LR:-1e-6}

    python3 -m verl.trainer.main_ppo --config-path=config \\
        --config-name='ppo_megatron_trainer.yaml'\\
        algorithm.adv_estimator=grpo \\
        data.train_files="$train_files" \\
        data.return_raw_chat=$return_raw_chat \\
        actor_rollout_ref.actor.optim.lr=$LR \\
        actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \\
        actor_rollout_ref.rollout.mode=$rollout_mode \\
        trainer.experiment_name='qwen2_7b_megatron' \\
        trainer.total_epochs=15 $@
    """
)


def write(tmp_path: Path, text: str, name: str = "run.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def as_bash_runs_it(script: Path, environ: dict[str, str]) -> list[str]:
    """The arguments bash hands to ``python3 -m ...`` (python3 replaced by a printer of them)."""
    shim = script.parent / "bin"
    shim.mkdir(exist_ok=True)
    printer = shim / "python3"
    printer.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    printer.chmod(0o755)
    out = subprocess.run(
        ["bash", str(script)],
        env={**environ, "PATH": f"{shim}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.splitlines()


def test_a_grpo_script_reads_as_bash_passes_it(tmp_path):
    script = write(tmp_path, GRPO)
    env = {"HOME": "/home/me"}
    got = read_script(script, env)
    assert got.module == "verl.trainer.main_ppo" and got.config_name is None and got.config_path is None
    assert got.source == f"{script}:3"
    assert ["-m", got.module, *got.overrides] == as_bash_runs_it(script, env)
    assert "trainer.logger=[console,wandb]" in got.overrides  # bash removed the quotes, as verl gets it


def test_a_megatron_script_with_a_conditional_is_read_as_bash_runs_it(tmp_path):
    # issue 34: an if on a [ a = b ] test is followed as bash would (verl's scripts branch on their knobs)
    script = write(tmp_path, MEGATRON)
    assert "data.return_raw_chat=True" in read_script(script, {"HOME": "/h"}).overrides
    unknown = write(tmp_path, MEGATRON.replace('[ "$rollout_mode" = "async" ]', "command -v nvcc"), "u.sh")
    with pytest.raises(ScriptError) as refused:
        read_script(unknown, {"HOME": "/h"})
    assert str(refused.value) == (
        f"{unknown}:13: $return_raw_chat is set at {unknown}:6 in a branch the kit cannot tell (the "
        f"condition at {unknown}:5 runs a command (command -v nvcc)), which the kit does not evaluate: "
        "export return_raw_chat=... before the sweep command"
    )
    env = {"HOME": "/h", "return_raw_chat": "True", "LR": "3e-6"}
    got = read_script(script, env)
    assert (got.config_path, got.config_name) == ("config", "ppo_megatron_trainer.yaml")
    bash = [a for a in as_bash_runs_it(script, env) if not a.startswith("--config")]
    assert ["-m", got.module, *got.overrides] == bash
    assert "data.train_files=['/h/data/gsm8k/train.parquet', '/h/data/math/train.parquet']" in got.overrides
    assert "actor_rollout_ref.actor.optim.lr=3e-6" in got.overrides  # ${LR:-1e-6}: the caller's value wins
    assert got.variables["rollout_mode"] == "async"
    del env["LR"]
    assert "actor_rollout_ref.actor.optim.lr=1e-6" in read_script(script, env).overrides


def test_what_the_kit_would_have_to_run_is_one_line_naming_it(tmp_path):
    script = write(
        tmp_path, "NGPU=$(nvidia-smi -L | wc -l)\npython3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=$NGPU\n"
    )
    with pytest.raises(ScriptError, match=r"run\.sh:2: \$NGPU is set by a command the kit does not run.*export NGPU="):
        read_script(script, {})
    assert read_script(script, {"NGPU": "4"}).overrides == ("trainer.n_gpus_per_node=4",)
    unset = write(tmp_path, "python3 -m verl.trainer.main_ppo data.train_files=$DATA/train.parquet\n", "u.sh")
    with pytest.raises(ScriptError, match=r"u\.sh:1: \$DATA has no value .*export DATA="):
        read_script(unset, {})
    none = write(tmp_path, "echo training\n", "n.sh")
    with pytest.raises(ScriptError, match=r"no `python -m <module> \.\.\.` command"):
        read_script(none, {})


def test_single_quotes_keep_dollars_and_a_recipe_entry_is_read(tmp_path):
    script = write(
        tmp_path,
        "python3 -m recipe.dapo.main_dapo \\\n  +trainer.note='cost $5' \\\n  data.gen_batch_size=${GEN:-96}\n",
    )
    got = read_script(script, {})
    assert got.module == "recipe.dapo.main_dapo"
    assert got.overrides == ("+trainer.note=cost $5", "data.gen_batch_size=96")
    assert ["-m", got.module, *got.overrides] == as_bash_runs_it(script, {})


# --- verl_script= on the sweep command -------------------------------------------------------------


def script_of(tmp_path: Path, tiny_model_dir: Path, gsm8k_dir: Path, body: str, name: str = "run.sh") -> Path:
    """A launch script in the published form on the tiny model and the prepared GSM8K."""
    return write(
        tmp_path,
        "set -x\n"
        f"DATA=${{DATA:-{gsm8k_dir}}}\n"
        "python3 -m verl.trainer.main_ppo \\\n"
        "    data.train_files=$DATA/train.parquet \\\n"
        "    data.val_files=$DATA/test.parquet \\\n"
        f"    actor_rollout_ref.model.path={tiny_model_dir} \\\n" + body + " $@\n",
        name,
    )


GRPO_BODY = """\
    algorithm.adv_estimator=grpo \\
    data.train_batch_size=16 \\
    data.max_response_length=256 \\
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \\
    actor_rollout_ref.actor.use_kl_loss=True \\
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \\
    actor_rollout_ref.rollout.name=vllm \\
    actor_rollout_ref.rollout.n=5 \\
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \\
    trainer.logger=['console'] \\
    trainer.n_gpus_per_node=2 \\
    trainer.nnodes=1 \\
    trainer.total_epochs=15"""

PPO_BODY = """\
    data.train_batch_size=16 \\
    data.max_response_length=256 \\
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \\
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \\
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \\
    actor_rollout_ref.rollout.name=vllm \\
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \\
    critic.optim.lr=1e-5 \\
    critic.model.path=$CRITIC \\
    critic.ppo_micro_batch_size_per_gpu=2 \\
    trainer.logger=['console'] \\
    trainer.n_gpus_per_node=1 \\
    trainer.total_epochs=2"""


def commands_of(dry_run_md: Path) -> list[str]:
    """Each point's verl command in dry_run.md (the lines after `-m`, joined)."""
    blocks = dry_run_md.read_text().split("verl.trainer.main_ppo \\\n")[1:]
    return [" ".join(line.strip(" \\") for line in b.split("```")[0].splitlines()) for b in blocks]


def test_a_grpo_script_runs_as_written_with_an_lr_axis_on_top(kit, tmp_path, tiny_model_dir, gsm8k_dir):
    script = script_of(tmp_path, tiny_model_dir, gsm8k_dir, GRPO_BODY)
    out = kit.run(
        "sweep.py",
        [
            "-m",
            f"verl_script={script}",
            "verl.actor_rollout_ref.actor.optim.lr=1e-6,3e-6",
            "dry_run=true",
            f"logs_root={tmp_path / 'logs'}",
            "sweep_name=script",
        ],
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"verl_script={script}: 18 setting(s) of verl.trainer.main_ppo from {script}:3" in out.stderr
    assert "experiment=verl_script hardware=none cluster.nodes=1 cluster.gpus_per_node=2" in out.stderr
    dry = tmp_path / "logs" / "script" / "dry_run.md"
    first, second = commands_of(dry)
    for command in (first, second):
        for setting in (
            "actor_rollout_ref.rollout.n=5",
            "data.train_batch_size=16",
            "trainer.total_epochs=15",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "trainer.n_gpus_per_node=2",
        ):
            assert setting in command, (setting, command)
        # no value of the kit's presets (gsm8k_grpo: 48 steps, n 8, KL 0.01; consumer_24gb: offload)
        for preset in ("total_training_steps", "rollout.n=8", "kl_loss_coef", "param_offload", "train_max_samples"):
            assert preset not in command, (preset, command)
    assert "actor_rollout_ref.actor.optim.lr=3e-06" in second and "optim.lr=3e-06" not in first
    # where each setting came from (issue 34 item 1): one table for the sweep, the kit's additions with reasons
    text = dry.read_text()
    assert "| actor_rollout_ref.actor.optim.lr | per point | axis |" in text
    assert "| data.train_batch_size | 16 | script |" in text
    assert "| trainer.default_local_dir | per point | kit | checkpoints in the run folder" in text
    assert "kit adds trainer.logger: verl's file logger added" in out.stdout


def test_a_ppo_script_keeps_its_estimator_and_its_critic(kit, tmp_path, tiny_model_dir, gsm8k_dir):
    script = script_of(tmp_path, tiny_model_dir, gsm8k_dir, PPO_BODY)
    out = kit.run(
        "sweep.py",
        [f"verl_script={script}", "dry_run=true", f"logs_root={tmp_path / 'logs'}", "sweep_name=ppo"],
        env={"CRITIC": str(tiny_model_dir)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (command,) = commands_of(tmp_path / "logs" / "ppo" / "dry_run.md")
    assert "algorithm.adv_estimator" not in command  # verl's default, gae, as the script leaves it
    assert f"critic.model.path={tiny_model_dir}" in command and "critic.ppo_micro_batch_size_per_gpu=2" in command


def test_a_megatron_script_composes_against_ppo_megatron_trainer(kit, tmp_path, tiny_model_dir, gsm8k_dir):
    """Issue 34 item 4: verl's Megatron config, verl's own composition and validate_config; the job runs
    main_ppo with that config name. (Before: refused in one line, "not supported yet".)"""
    megatron = script_of(
        tmp_path,
        tiny_model_dir,
        gsm8k_dir,
        GRPO_BODY + " \\\n    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "meg.sh",
    ).read_text()
    megatron = write(
        tmp_path,
        megatron.replace(
            "python3 -m verl.trainer.main_ppo",
            "python3 -m verl.trainer.main_ppo --config-path=config --config-name='ppo_megatron_trainer.yaml'",
        ),
        "meg.sh",
    )
    args = [f"verl_script={megatron}", "dry_run=true", f"logs_root={tmp_path / 'logs'}"]
    lacking = kit.run("sweep.py", [*args, "sweep_name=meg0"])  # this environment has no megatron-core
    assert lacking.returncode == 2 and "Traceback" not in lacking.stderr
    assert "strategy megatron needs megatron-core, which the job's Python" in lacking.stderr
    env = megatron_packages(kit, tmp_path)
    out = kit.run("sweep.py", [*args, "sweep_name=meg"], env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    text = (tmp_path / "logs" / "meg" / "dry_run.md").read_text()
    assert "verl.trainer.main_ppo \\\n  --config-name \\\n  ppo_megatron_trainer \\\n" in text
    (command,) = commands_of(tmp_path / "logs" / "meg" / "dry_run.md")
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2" in command
    config = "--config-path=config --config-name='ppo_megatron_trainer.yaml'"
    # verl's examples/ppo_trainer/run_qwen3_8b_megatron.sh: ppo_trainer with a group choice
    engine = write(tmp_path, megatron.read_text().replace(config, "model_engine=megatron"), "engine.sh")
    out = kit.run("sweep.py", [f"verl_script={engine}", *args[1:], "sweep_name=engine"], env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    text = (tmp_path / "logs" / "engine" / "dry_run.md").read_text()
    assert "verl.trainer.main_ppo \\\n  --config-name \\\n  ppo_trainer \\\n  model_engine=megatron \\\n" in text
    (command,) = commands_of(tmp_path / "logs" / "engine" / "dry_run.md")
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2" in command
    assert "verl.model_engine" not in command and command.count("model_engine=megatron") == 1
    manifest = (tmp_path / "logs" / "engine" / "manifest.json").read_text()  # each point's kit overrides
    assert "verl_base@verl=ppo_trainer__model_engine-megatron" in manifest
    assert json.dumps("++verl_entry.groups=['model_engine=megatron']") in manifest


def megatron_packages(kit, tmp_path: Path) -> dict[str, str]:
    """The environment with Megatron's packages' metadata on ``PYTHONPATH`` (a stand-in: Megatron needs a GPU),
    as the job's Python would list them."""
    standin = tmp_path / "megatron_packages"
    for name, version in (("megatron_core", "0.16.0"), ("megatron_bridge", "0.2.0")):
        (standin / f"{name}-{version}.dist-info").mkdir(parents=True, exist_ok=True)
        (standin / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n"
        )
    return {**kit.env(), "PYTHONPATH": os.pathsep.join(filter(None, [str(standin), os.environ.get("PYTHONPATH")]))}


def test_an_unknown_config_or_a_missing_recipe_is_refused_in_one_line(kit, tmp_path):
    other = write(tmp_path, "python3 -m verl.trainer.main_ppo --config-name=evaluation data.train_batch_size=8\n", "e")
    out = kit.run("sweep.py", [f"verl_script={other}", "dry_run=true", f"logs_root={tmp_path / 'logs'}"])
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        f"error: verl_script={other}: --config-name=evaluation ({other}:1); the kit composes verl's ppo_trainer "
        "and ppo_megatron_trainer for verl.trainer.main_ppo: use one of them"
    )
    recipe = write(tmp_path, "python3 -m recipe.dapo.main_dapo data.gen_batch_size=96\n", "dapo.sh")
    out = kit.run("sweep.py", [f"verl_script={recipe}", "dry_run=true", f"logs_root={tmp_path / 'logs'}"])
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "its entry recipe.dapo.main_dapo (" in out.stderr
    assert "pass recipe_root=<your verl-recipe checkout>" in out.stderr


SHAPES = Path(__file__).resolve().parents[1] / "data" / "verl_shapes"
#: Scripts written for these tests in the shapes of verl's and verl-recipe's published ones (each names
#: the published script and commit it models): arrays and `case "${DEVICE}"`, `if [ ... ] && { ...; }`,
#: `uv run ... python3 -m`, `$((a + b))`, `SCRIPT_DIR=$(cd "$(dirname ...)" && pwd)`, `| tee log`,
#: `ray job submit ... -- python3 -m`, `${VAR:?msg}`, `${VAR:-"${OTHER}/x"}`.
AS_BASH = sorted(p.name for p in SHAPES.glob("*.sh"))


def bash_prints(script: Path, environ: dict[str, str], tmp_path: Path) -> list[str]:
    """What bash passes to ``python3 -m`` (python3, python and uv replaced by printers; ``python3 -c``
    fails, as it does where torch_npu is not installed; ``ray job submit ... --`` runs what follows)."""
    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    printer = '#!/bin/sh\n[ "$1" = -c ] && exit 1\nfor a in "$@"; do printf "%s\\n" "$a"; done\n'
    ray = '#!/bin/sh\nwhile [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n'
    for name, text in (("python3", printer), ("python", printer), ("uv", printer), ("ray", ray)):
        (shim / name).write_text(text)
        (shim / name).chmod(0o755)
    env = {**environ, "PATH": f"{shim}:/usr/bin:/bin"}
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    lines = out.stdout.splitlines()
    return lines[lines.index("-m") :]


@pytest.mark.parametrize("name", AS_BASH)
def test_scripts_in_published_shapes_read_as_bash_runs_them(name, tmp_path):
    script = tmp_path / name  # a copy: bash writes the `| tee` log beside the script
    script.write_text((SHAPES / name).read_text())
    env = {"HOME": "/h", "DEVICE": "gpu", "PWD": str(tmp_path), "ADAPTER": "/adapter"}
    env["RUN_NAME"] = "e"  # the default runs `date`
    got = read_script(script, env)
    flags = [f"--config-path={got.config_path}"] * bool(got.config_path) + [
        f"--config-name={got.config_name}"
    ] * bool(got.config_name)
    bash = bash_prints(script, env, tmp_path)
    joined = []
    for word in bash:  # --config-name X as --config-name=X
        if joined and joined[-1] in ("--config-path", "--config-name"):
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    assert ["-m", got.module, *flags, *got.overrides] == joined


def test_a_default_that_runs_a_command_is_not_read_when_the_variable_is_set(tmp_path):
    text = (
        "DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}\n"
        'case "${DEVICE}" in\n  gpu) tp=2 ;;\n  npu) tp=4 ;;\nesac\n'
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.tensor_model_parallel_size=$tp\n"
    )
    script = write(tmp_path, text)
    tp = "actor_rollout_ref.rollout.tensor_model_parallel_size=4"
    assert read_script(script, {"DEVICE": "npu"}).overrides == (tp,)
    with pytest.raises(ScriptError, match=r"\$DEVICE decides the branch at .*export DEVICE="):
        read_script(script, {})


def test_a_mapping_field_verl_declares_but_its_yaml_leaves_out_takes_a_plus_key():
    # verl's Ascend GRPO script: +actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16
    # (FSDPEngineConfig.mixed_precision: Optional[dict], absent from verl's YAML; verl's engine reads it)
    from grpokit.validate.command_line import check

    key = "verl.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"
    assert check(["model=tiny", f"+{key}=bf16"])[1] == []
    (unknown,) = check(["model=tiny", "+verl.actor_rollout_ref.actor.fsdp_config.no_such.x=1"])[1]
    assert "it would be added and ignored" in unknown.message


def test_the_sbatch_body_reads_a_script_as_the_sweep_does(tmp_path, tiny_model_dir, gsm8k_dir, capsys):
    """``sbatch slurm/train.sbatch verl_script=<file>``: grpokit run (the job's body) expands the script
    into the same settings before composing, and a script it cannot read is one line, exit 2."""
    from grpokit.cli import run

    script = script_of(tmp_path, tiny_model_dir, gsm8k_dir, GRPO_BODY)
    overrides, said = run.job_overrides([f"verl_script={script}", "verl.actor_rollout_ref.actor.optim.lr=3e-6"], {})
    assert "experiment=verl_script" in overrides and "hardware=none" in overrides
    assert any(o.endswith("actor_rollout_ref.rollout.n=5") for o in overrides)
    assert overrides[-1] == "verl.actor_rollout_ref.actor.optim.lr=3e-6"  # the command's own keys win
    assert said and said[0].startswith(f"verl_script={script}: ")
    assert run.main([f"verl_script={tmp_path / 'missing.sh'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"run.py: verl_script={tmp_path / 'missing.sh'}: cannot be read")

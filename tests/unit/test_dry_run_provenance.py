"""Where each setting of a point's verl command came from (grpokit.submit.provenance; issue 34 items 1, 2).

A real point (the kit's composition and build_point on verl's config) from a launch script read by
``verl_script=``, an axis, a ``verl.`` key typed over the script's value; each setting's source is
checked, and the kit's additions carry their reasons. Without a script, a preset's values say so.
"""

from __future__ import annotations

import os

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.config.verl_script import expand_argv
from grpokit.submit.provenance import sources, summary_lines, sweep_sources, sweep_table
from grpokit.validate.command_line import check

SCRIPT = """\
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_files={data}/train.parquet \\
    data.val_files={data}/test.parquet \\
    data.train_batch_size=16 \\
    actor_rollout_ref.model.path={model} \\
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \\
    actor_rollout_ref.rollout.n=5 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \\
    trainer.logger=['console'] \\
    trainer.n_gpus_per_node=1 \\
    trainer.total_epochs=3 $@
"""


def point(argv: list[str], swept: dict, index: int = 0):
    argv, _ = expand_argv(argv, os.environ)
    argv, problems = check(argv)
    assert not problems, [str(p) for p in problems]
    return build_point(compose_kit(argv), index=index, kit_overrides=argv, swept=swept)


def test_each_setting_names_its_source_and_each_kit_addition_its_reason(tmp_path, tiny_model_dir, gsm8k_dir):
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT.format(data=gsm8k_dir, model=tiny_model_dir))
    common = [f"verl_script={script}", "verl.trainer.total_epochs=2", f"logs_root={tmp_path}", "sweep_name=s"]
    lr = "verl.actor_rollout_ref.actor.optim.lr"
    specs = [point([*common, f"{lr}={v}"], {lr: v}, i) for i, v in enumerate((1e-6, 3e-6))]
    rows = sweep_sources(specs)
    got = {s.key: s for s in rows[1]}
    assert got["data.train_batch_size"].source == "script" and got["data.train_batch_size"].value == "16"
    assert (got["actor_rollout_ref.actor.optim.lr"].source, got["actor_rollout_ref.actor.optim.lr"].value) == (
        "axis",
        "3e-06",
    )
    first = {s.key: s for s in rows[0]}  # verl's default lr: not passed, still shown as the axis's
    assert first["actor_rollout_ref.actor.optim.lr"].source == "axis"
    assert got["trainer.total_epochs"].source == "command" and "over the script's 3" in got["trainer.total_epochs"].why
    for key, reason in (
        ("trainer.default_local_dir", "checkpoints in the run folder"),
        ("trainer.logger", "metrics.jsonl, which the kit reads (the script had [console])"),
        ("ray_kwargs.ray_init.runtime_env.worker_process_setup_hook", "the save before the time limit"),
        ("trainer.project_name", "the sweep's name"),
    ):
        assert got[key].source == "kit" and reason in got[key].why, got[key]
    assert not [s for s in rows[1] if s.source == "preset"]  # no preset applies with verl_script=
    table = "\n".join(sweep_table(rows))
    assert "| actor_rollout_ref.actor.optim.lr | per point | axis |" in table
    assert "| data.train_batch_size | 16 | script | |" in table
    lines = summary_lines(rows)
    assert lines[0].startswith("Settings of each point's verl command:") and "from the script" in lines[0]
    assert any(line.startswith("  kit adds trainer.default_local_dir: checkpoints") for line in lines)


def test_a_presets_values_say_which_preset(tmp_path, base):
    spec = point([*base, "verl.data.train_batch_size=32"], {})
    got = {s.key: s for s in sources(spec, None)}
    assert got["data.train_batch_size"].source == "command"
    presets = [s for s in got.values() if s.source == "preset"]
    assert presets and all("experiment=gsm8k_grpo" in s.why for s in presets)


def test_a_value_spelt_otherwise_by_hydra_is_still_the_scripts():
    from grpokit.submit.provenance import _unquoted

    assert _unquoted("1e-6") == _unquoted("1e-06") == _unquoted("'0.000001'")
    assert _unquoted("[console]") == "[console]" and _unquoted("8") != _unquoted("16")

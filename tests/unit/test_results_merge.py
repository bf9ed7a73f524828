"""launch/merge.py: checkpoint choice, the merger command line, refusals, and one real CPU merge."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from grpokit.evaluation import model_merge as merge_cmd
from grpokit.evaluation.model_merge import CheckpointError, choose_checkpoint, merge_run
from grpokit.paths import kit_command

REPO = Path(__file__).resolve().parents[2]


def make_ckpt(ckpt_dir: Path, step: int, world: int = 2, drop: tuple[str, ...] = ()) -> Path:
    """global_step_N with verl's FSDPCheckpointManager file names; ``drop`` removes some."""
    actor = ckpt_dir / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text("{}")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    for kind in ("model", "optim", "extra_state"):
        for r in range(world):
            torch.save({}, actor / f"{kind}_world_size_{world}_rank_{r}.pt")
    torch.save({}, actor.parent / "data.pt")
    for rel in drop:
        target = actor.parent / rel
        if target.is_dir():
            import shutil

            shutil.rmtree(target)
        else:
            target.unlink()
    return actor.parent


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "logs" / "s" / "000_a"
    ckpts = run / "checkpoints"
    make_ckpt(ckpts, 10)
    make_ckpt(ckpts, 20)
    make_ckpt(ckpts, 30, drop=("actor/model_world_size_2_rank_1.pt",))
    (ckpts / "latest_checkpointed_iteration.txt").write_text("30")
    return run


def load_cli():
    """The command's module (grpokit.cli), as ``grpokit <command>`` runs it."""
    return importlib.import_module(f"grpokit.cli.{'merge'}")


def test_default_is_latest_complete_and_exact_command(run_dir):
    argv = merge_run(run_dir, dry_run=True)
    assert argv == [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(run_dir / "checkpoints" / "global_step_20" / "actor"),
        "--target_dir",
        str(run_dir / "hf"),
    ]


def test_command_parses_with_verls_own_cli(run_dir, monkeypatch):
    # The argv must be accepted by the installed merger's parser, and map to the folders we mean.
    from verl.model_merger.base_model_merger import generate_config_from_args, parse_args

    argv = merge_run(run_dir, step=10, dry_run=True)
    monkeypatch.setattr(sys, "argv", ["verl.model_merger", *argv[3:]])
    cfg = generate_config_from_args(parse_args())
    assert cfg.operation == "merge" and cfg.backend == "fsdp"
    assert cfg.local_dir == str(run_dir / "checkpoints" / "global_step_10" / "actor")
    assert cfg.hf_model_config_path == str(run_dir / "checkpoints" / "global_step_10" / "actor" / "huggingface")
    assert cfg.target_dir == str(run_dir / "hf")


def test_explicit_incomplete_step_is_refused(run_dir):
    with pytest.raises(CheckpointError, match=r"global_step_30 is incomplete: missing model_world_size_2_rank_R.pt"):
        choose_checkpoint(run_dir, 30)


@pytest.mark.parametrize(
    ("drop", "needle"),
    [
        (("data.pt",), "data.pt"),
        (("actor/fsdp_config.json",), "fsdp_config.json"),
        (("actor/optim_world_size_2_rank_0.pt",), "optim_world_size_2_rank_R.pt for ranks [0]"),
        (("actor/huggingface",), "huggingface"),
    ],
)
def test_each_missing_piece_is_named(tmp_path, drop, needle):
    run = tmp_path / "r"
    make_ckpt(run / "checkpoints", 5, drop=drop)
    with pytest.raises(CheckpointError, match="no complete checkpoint") as exc:
        choose_checkpoint(run)
    assert needle in str(exc.value)


def test_missing_step_and_no_checkpoints(run_dir, tmp_path):
    with pytest.raises(CheckpointError, match=r"no global_step_99; steps present: \[10, 20, 30\]"):
        choose_checkpoint(run_dir, 99)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="save_freq"):
        choose_checkpoint(tmp_path / "empty")


def test_tracker_pointing_at_missing_folder(tmp_path):
    run = tmp_path / "r"
    make_ckpt(run / "checkpoints", 5)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("8")
    with pytest.raises(CheckpointError, match="does not exist"):
        choose_checkpoint(run, 8)
    assert choose_checkpoint(run).step == 5


def test_cli_error_paths(run_dir, tmp_path, capsys):
    cli = load_cli()
    assert cli.main([str(run_dir), "--step", "30", "--dry-run"]) == 2
    assert "incomplete" in capsys.readouterr().err
    assert cli.main([str(tmp_path / "nope")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    (run_dir / "hf").mkdir()
    (run_dir / "hf" / "config.json").write_text("{}")
    assert cli.main([str(run_dir)]) == 2  # the real merge refuses before running the merger
    assert "--overwrite" in capsys.readouterr().err
    assert cli.main([str(run_dir), "--dry-run", "--overwrite"]) == 0
    assert "global_step_20/actor" in capsys.readouterr().out


def test_dry_run_says_what_the_merge_would_do_with_hf_there_or_not(run_dir, capsys):
    # Issue 37: a dry run on a merged point was refused ("pass --overwrite"); it says what would happen.
    cli = load_cli()
    assert cli.main([str(run_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[
        0
    ] == f"dry run: would merge step 20 ({run_dir}/checkpoints/global_step_20) into {run_dir}/hf (new); " + (
        "the merger's command:"
    )
    assert "global_step_20/actor" in out[1] and not (run_dir / "hf").exists()
    (run_dir / "hf").mkdir()
    (run_dir / "hf" / "config.json").write_text("{}")
    assert cli.main([str(run_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{run_dir}/hf already holds a merged model: it would be kept and nothing merged" in out
    assert "add --overwrite to write step 20" in out
    assert cli.main([str(run_dir), "--dry-run", "--overwrite"]) == 0
    assert f"{run_dir}/hf already holds a merged model: --overwrite would write step 20" in capsys.readouterr().out
    assert (run_dir / "hf" / "config.json").read_text() == "{}"  # nothing ran


def _sweep_folder(sweep: Path, names: list[str]) -> Path:
    points = [{"index": i, "name": n, "run_dir": str(sweep / n), "swept": {}} for i, n in enumerate(names)]
    for n in names:
        (sweep / n).mkdir(parents=True, exist_ok=True)
    (sweep / "manifest.json").write_text(json.dumps({"sweep": sweep.name, "points": points}))
    return sweep


def test_a_sweep_folder_is_named_as_one_with_a_point_folder_to_pass(tmp_path, capsys):
    # Issue 37: it was told "the run saves only with trainer.save_freq > 0".
    sweep = _sweep_folder(tmp_path / "logs" / "s", ["000_lr-1", "001_lr-2", "002_lr-3"])
    cli = load_cli()
    assert cli.main([str(sweep)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "save_freq" not in err
    assert f"{sweep} is a sweep folder (manifest.json), not a point's run folder" in err
    assert "3 point folders, e.g. its first: " in err and err.rstrip().endswith(
        kit_command("merge", f"{sweep}/000_lr-1")
    )
    make_ckpt(sweep / "001_lr-2" / "checkpoints", 4)  # a point with a complete checkpoint is the example
    assert cli.main([str(sweep), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "e.g. the first with a complete checkpoint: " in err and err.rstrip().endswith(
        kit_command("merge", f"{sweep}/001_lr-2")
    )


def test_merger_failure_is_reported(run_dir, monkeypatch, capsys):
    # The fake shards are not torch files: verl's real merger fails and merge.py says so in one line
    # (the checkpoint, the merger's exception, its log), never its traceback; no hf/ is left.
    cli = load_cli()
    assert cli.main([str(run_dir)]) == 1
    err = capsys.readouterr().err.strip()
    actor = run_dir / "checkpoints" / "global_step_20" / "actor"
    assert err.startswith(f"error: merging {actor} failed: verl's model merger exited 1: ") and "\n" not in err
    assert "Traceback" not in err and err.endswith(f"(whole output: {run_dir / 'merge.log'})")
    assert "Traceback" in (run_dir / "merge.log").read_text()
    assert not (run_dir / "hf").exists()


@pytest.mark.timeout(180)
def test_real_cpu_merge_of_a_tiny_model(tmp_path):
    """verl's merger on a world-size-1 checkpoint of a tiny random Qwen2 (no download, CPU)."""
    import torch
    from safetensors.torch import load_file
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    run = tmp_path / "000_tiny"
    step_dir = run / "checkpoints" / "global_step_2"
    actor = step_dir / "actor"
    (actor / "huggingface").mkdir(parents=True)
    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        architectures=["Qwen2ForCausalLM"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    cfg.save_pretrained(actor / "huggingface")
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(63)} | {"<unk>": 63}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(actor / "huggingface")
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    for kind in ("optim", "extra_state"):
        torch.save({}, actor / f"{kind}_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    torch.save({}, step_dir / "data.pt")

    merge_run(run)
    merged = load_file(run / "hf" / "model.safetensors")
    ref = model.state_dict()
    assert set(merged) == set(ref)
    for k, v in ref.items():
        # verl saves the merged model in bfloat16.
        assert torch.equal(merged[k].float(), v.to(merged[k].dtype).float()), k
    assert (run / "hf" / "tokenizer.json").exists()


def test_merge_cmd_uses_given_python():
    info = merge_cmd.CheckpointInfo(step=1, path=Path("/c/global_step_1"), complete=True)
    assert merge_cmd.merge_command(info, Path("/r/hf"), python="python")[:4] == [
        "python",
        "-m",
        "verl.model_merger",
        "merge",
    ]

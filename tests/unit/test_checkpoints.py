"""grpokit.runtime.decisions.checkpoints: completeness of verl FSDP checkpoints."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import time
import zipfile
from pathlib import Path

import pytest
import torch

from grpokit.runtime.decisions.checkpoints import (
    MANIFEST,
    check_crcs,
    inspect_checkpoint,
    latest_complete,
    list_checkpoints,
    read_tracker,
    record_saved,
    torch_file_crc_problem,
    torch_file_problem,
)
from grpokit.runtime.decisions.resume_from import prepare_resume

REPO = Path(__file__).resolve().parents[2]


def make_ckpt(
    root: Path,
    step: int,
    world: int = 2,
    skip: tuple[str, ...] = (),
    fsdp_config: bool = True,
    data_pt: bool = True,
    hf: bool = True,
) -> Path:
    """A global_step_N folder with the file names verl's FSDPCheckpointManager.save_checkpoint writes."""
    step_dir = root / f"global_step_{step}"
    actor = step_dir / "actor"
    actor.mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        for rank in range(world):
            name = f"{kind}_world_size_{world}_rank_{rank}.pt"
            if name not in skip:
                torch.save({"rank": rank}, actor / name)
    if fsdp_config:
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    if hf:
        (actor / "huggingface").mkdir()
        (actor / "huggingface" / "config.json").write_text("{}")
    if data_pt:
        torch.save({"step": step}, step_dir / "data.pt")
    return step_dir


def test_complete_checkpoint(tmp_path):
    info = inspect_checkpoint(make_ckpt(tmp_path, 5, world=4))
    assert info.complete and info.problems == [] and info.world_size == 4 and info.step == 5
    assert info.actor_dir == tmp_path / "global_step_5" / "actor"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"data_pt": False}, "data.pt"),
        ({"skip": ("model_world_size_2_rank_1.pt",)}, "model_world_size_2_rank_R.pt for ranks [1]"),
        ({"skip": ("optim_world_size_2_rank_0.pt",)}, "optim_world_size_2_rank_R.pt for ranks [0]"),
        ({"skip": ("extra_state_world_size_2_rank_1.pt",)}, "extra_state"),
        ({"fsdp_config": False}, "fsdp_config.json"),
        ({"hf": False}, "huggingface"),
    ],
)
def test_incomplete_checkpoint_names_the_problem(tmp_path, kwargs, needle):
    info = inspect_checkpoint(make_ckpt(tmp_path, 3, **kwargs))
    assert not info.complete
    assert any(needle in p for p in info.problems), info.problems


def test_world_size_from_fsdp_config_catches_missing_ranks(tmp_path):
    # Shards of ranks 0-1 only, but the save ran on 4 GPUs: names alone would look complete.
    step_dir = make_ckpt(tmp_path, 2, world=2)
    (step_dir / "actor" / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 4}))
    info = inspect_checkpoint(step_dir)
    assert not info.complete
    assert any("ranks [0, 1, 2, 3]" in p for p in info.problems)


def test_world_size_from_names_without_fsdp_config(tmp_path):
    info = inspect_checkpoint(make_ckpt(tmp_path, 2, world=3, fsdp_config=False))
    assert info.world_size == 3 and not info.complete


def test_list_and_latest_complete_with_tracker_on_incomplete(tmp_path):
    make_ckpt(tmp_path, 10)
    make_ckpt(tmp_path, 20)
    make_ckpt(tmp_path, 30, data_pt=False)  # killed during the save
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("30")
    infos = list_checkpoints(tmp_path)
    assert [(i.step, i.complete, i.tracked) for i in infos] == [
        (10, True, False),
        (20, True, False),
        (30, False, True),
    ]
    assert latest_complete(tmp_path).step == 20
    assert read_tracker(tmp_path) == 30


def test_tracker_names_missing_folder(tmp_path):
    make_ckpt(tmp_path, 10)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("40\n")
    infos = list_checkpoints(tmp_path)
    assert infos[-1].step == 40 and not infos[-1].complete
    assert "does not exist" in infos[-1].problems[0]
    assert latest_complete(tmp_path).step == 10


def test_no_checkpoints(tmp_path):
    assert list_checkpoints(tmp_path / "absent") == []
    assert latest_complete(tmp_path) is None


def test_verl_reads_the_same_tracker(tmp_path):
    # verl's own resume helper agrees on which folder the tracker names.
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    make_ckpt(tmp_path, 7)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    assert Path(find_latest_ckpt_path(str(tmp_path))) == list_checkpoints(tmp_path)[0].path


# -- complete by content (issue 24 item 3): 0-byte and truncated files of real torch.save output ---------


def _cut(path: Path, size: int | None) -> None:
    """``truncate -s <size>`` (None: half the file)."""
    os.truncate(path, path.stat().st_size // 2 if size is None else size)


@pytest.mark.parametrize("size", [0, None], ids=["zeroed", "truncated-to-half"])
@pytest.mark.parametrize("rel", ["actor/model_world_size_2_rank_0.pt", "actor/optim_world_size_2_rank_1.pt", "data.pt"])
def test_a_damaged_torch_file_without_a_manifest_makes_the_step_incomplete(tmp_path, rel, size):
    step_dir = make_ckpt(tmp_path, 12)
    torch.save({"w": torch.arange(4096, dtype=torch.float32)}, step_dir / rel)  # a real tensor file
    assert inspect_checkpoint(step_dir).complete
    _cut(step_dir / rel, size)
    info = inspect_checkpoint(step_dir)
    assert not info.complete
    assert len(info.problems) == 1 and info.problems[0].startswith(str(step_dir / rel)), info.problems
    assert ("is empty (0 bytes)" if size == 0 else "damaged torch file") in info.problems[0]


def test_a_file_that_is_no_torch_file_is_named(tmp_path):
    step_dir = make_ckpt(tmp_path, 3)
    (step_dir / "data.pt").write_bytes(b"not a checkpoint")
    (problem,) = inspect_checkpoint(step_dir).problems
    assert (
        problem
        == f"{step_dir / 'data.pt'} is not a torch file (neither torch.save's zip archive nor a pickle; 16 bytes)"
    )


def test_the_header_check_reads_no_tensor_and_accepts_what_torch_loads(tmp_path):
    # torch.load agrees with the check on every file it accepts; and the check is the zip directory only
    step_dir = make_ckpt(tmp_path, 4)
    big = step_dir / "actor" / "model_world_size_2_rank_0.pt"
    torch.save({"w": torch.zeros(4_000_000)}, big)  # 16 MB
    t0 = time.perf_counter()
    assert torch_file_problem(big) is None
    assert time.perf_counter() - t0 < 0.05
    for path in step_dir.rglob("*.pt"):
        torch.load(path, weights_only=True)


def test_the_trainer_double_writes_real_torch_files(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "fake_trainer_ck", REPO / "tests" / "doubles" / "fake_verl_trainer.py"
    )
    double = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(double)
    double.save(tmp_path, 5, world=2, crash_in_save=None)
    assert latest_complete(tmp_path).step == 5
    assert torch.load(tmp_path / "global_step_5" / "data.pt", weights_only=True) == {"step": 5}
    shard = torch.load(tmp_path / "global_step_5" / "actor" / "optim_world_size_2_rank_1.pt", weights_only=True)
    assert shard["double"] == "optim" and shard["rank"] == 1


def test_the_manifest_records_sizes_once_the_tracker_names_the_step(tmp_path):
    step_dir = make_ckpt(tmp_path, 8)
    assert record_saved(tmp_path) is None and not (step_dir / MANIFEST).exists()  # no tracker yet: a save under way
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    assert record_saved(tmp_path) == 8
    recorded = json.loads((step_dir / MANIFEST).read_text())
    assert recorded["step"] == 8
    assert recorded["files"]["data.pt"] == (step_dir / "data.pt").stat().st_size
    assert len(recorded["files"]) == 2 * 3 + 3  # shards, fsdp_config.json, huggingface/config.json, data.pt
    (step_dir / MANIFEST).unlink()
    assert record_saved(tmp_path, seen=8) == 8 and not (step_dir / MANIFEST).exists()  # unchanged: nothing read


def test_with_a_manifest_sizes_decide_even_for_a_file_whose_header_is_whole(tmp_path):
    # a shard replaced by another whole torch file (a copy from another step, a rewrite cut short
    # and redone smaller): the header check passes it, the size recorded at save does not
    step_dir = make_ckpt(tmp_path, 8)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    record_saved(tmp_path)
    shard = step_dir / "actor" / "model_world_size_2_rank_1.pt"
    was = shard.stat().st_size
    torch.save({"w": torch.zeros(100)}, shard)
    assert torch_file_problem(shard) is None and shard.stat().st_size != was
    (problem,) = inspect_checkpoint(step_dir).problems
    assert problem == f"{shard} has {shard.stat().st_size} bytes, {was} at save ({MANIFEST})"
    _cut(shard, 0)
    assert inspect_checkpoint(step_dir).problems == [f"{shard} has 0 bytes, {was} at save ({MANIFEST})"]


def test_a_damaged_step_gets_no_manifest(tmp_path, caplog):
    step_dir = make_ckpt(tmp_path, 8)
    _cut(step_dir / "data.pt", 0)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("8")
    assert record_saved(tmp_path) == 8
    assert not (step_dir / MANIFEST).exists()
    assert f"checkpoint {step_dir} is not whole after its save: {step_dir / 'data.pt'} is empty" in caplog.text


def test_a_truncated_safetensors_file_is_found(tmp_path):
    from safetensors.torch import save_file

    step_dir = make_ckpt(tmp_path, 2)
    hf = step_dir / "actor" / "huggingface" / "model.safetensors"  # verl's save_contents with hf_model
    save_file({"w": torch.ones(1000)}, hf)
    assert inspect_checkpoint(step_dir).complete
    _cut(hf, hf.stat().st_size - 1)
    (problem,) = inspect_checkpoint(step_dir).problems
    assert problem.startswith(f"{hf} is truncated: its header needs")


def test_resume_sets_a_zeroed_newest_step_aside_and_resumes_the_previous(tmp_path, caplog):
    """The issue's case: ``truncate -s 0 global_step_12/actor/model_world_size_1_rank_0.pt``."""
    make_ckpt(tmp_path, 8, world=1)
    step12 = make_ckpt(tmp_path, 12, world=1)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("12")
    record_saved(tmp_path)
    _cut(step12 / "actor" / "model_world_size_1_rank_0.pt", 0)
    report = prepare_resume(tmp_path)
    assert report["resume_step"] == 8 and report["tracker_was"] == 12
    assert read_tracker(tmp_path) == 8
    (aside,) = report["set_aside"]
    assert Path(aside).name.startswith("global_step_12.incomplete-") and not step12.exists()
    assert report["note"] == (
        f"checkpoint global_step_12 set aside as {Path(aside).name}: "
        f"{step12 / 'actor' / 'model_world_size_1_rank_0.pt'} has 0 bytes, "
        f"{json.loads((Path(aside) / MANIFEST).read_text())['files']['actor/model_world_size_1_rank_0.pt']} "
        f"at save ({MANIFEST}); resuming from global_step_8"
    )
    moved = [r.getMessage() for r in caplog.records if "is incomplete" in r.getMessage()]
    assert len(moved) == 1 and "model_world_size_1_rank_0.pt has 0 bytes" in moved[0]


def test_resume_with_no_whole_step_left_trains_from_scratch_and_says_so(tmp_path):
    step = make_ckpt(tmp_path, 4, world=1)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    _cut(step / "data.pt", 0)
    report = prepare_resume(tmp_path)
    assert report["resume_step"] is None and not (tmp_path / "latest_checkpointed_iteration.txt").exists()
    assert report["note"].endswith(
        f"{step / 'data.pt'} is empty (0 bytes); no complete checkpoint: training from scratch"
    )


# -- intact by content (issue 36 item 3): bytes flipped in the middle, the size kept ---------------------


def _flip_middle(path: Path, count: int = 4) -> None:
    """Invert ``count`` bytes in the middle of ``path``; its size stays the same (a bad sector, a bad copy)."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        chunk = fh.read(count)
        fh.seek(size // 2)
        fh.write(bytes(b ^ 0xFF for b in chunk))
    assert path.stat().st_size == size


def _tensor_file(path: Path) -> Path:
    torch.save({"w": torch.arange(1_000_000, dtype=torch.float32)}, path)  # 4 MB: the middle is tensor data
    return path


def test_the_crc_check_finds_flipped_bytes_that_size_and_header_checks_pass(tmp_path):
    path = _tensor_file(tmp_path / "model_world_size_1_rank_0.pt")
    assert torch_file_crc_problem(path) is None  # intact
    _flip_middle(path)
    assert torch_file_problem(path) is None  # the header check (and any size check) passes it
    problem = torch_file_crc_problem(path)
    assert problem.startswith(f"{path} is damaged: member model_world_size_1_rank_0/data/0 (4000000 bytes at offset ")
    assert problem.endswith("Bad CRC-32 for file 'model_world_size_1_rank_0/data/0'"), problem
    # what verl's resume would have met: torch.load reads tensor data without its CRC-32, so the
    # damage is not an error there but silently changed weights (or optimizer moments)
    loaded = torch.load(path, weights_only=True)["w"]
    assert not torch.equal(loaded, torch.arange(1_000_000, dtype=torch.float32))


def test_the_crc_check_finds_a_flipped_pickle_byte_that_torch_load_fails_on(tmp_path):
    path = tmp_path / "data.pt"
    torch.save({"step": 12, "sampler": list(range(200))}, path)
    member = zipfile.ZipFile(path).getinfo("data/data.pkl")
    with open(path, "r+b") as fh:  # the member's bytes start after its local header (30 bytes + name + extra)
        fh.seek(member.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", fh.read(4))
        start = member.header_offset + 30 + name_len + extra_len
        fh.seek(start)
        opcode = fh.read(1)  # the pickle's PROTO opcode (0x80)
        fh.seek(start)
        fh.write(bytes([opcode[0] ^ 0xFF]))
    assert torch_file_problem(path) is None
    problem = torch_file_crc_problem(path)
    assert "member data/data.pkl" in problem and "Bad CRC-32" in problem, problem
    with pytest.raises(Exception):  # noqa: B017 - the unpickler's own error for an unknown opcode
        torch.load(path, weights_only=True)


@pytest.mark.parametrize("size", [0, None], ids=["zeroed", "truncated-to-half"])
def test_the_crc_check_finds_truncated_files_too(tmp_path, size):
    path = _tensor_file(tmp_path / "data.pt")
    _cut(path, size)
    problem = torch_file_crc_problem(path)
    assert problem.startswith(str(path)) and ("is empty (0 bytes)" if size == 0 else "damaged torch file") in problem


def test_files_without_crcs_are_left_to_the_header_checks(tmp_path):
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(10)}, legacy, _use_new_zipfile_serialization=False)  # a pickle stream
    torch.serialization.set_crc32_options(False)
    try:
        no_crc = _tensor_file(tmp_path / "no_crc.pt")
    finally:
        torch.serialization.set_crc32_options(True)
    _flip_middle(no_crc)
    assert torch_file_crc_problem(legacy) is None and torch_file_crc_problem(no_crc) is None


def test_check_crcs_reads_every_pt_of_the_step_and_says_what_it_read(tmp_path):
    step_dir = make_ckpt(tmp_path, 3, world=1)
    shard = _tensor_file(step_dir / "actor" / "optim_world_size_1_rank_0.pt")
    ok = check_crcs(step_dir)
    assert ok.problems == [] and ok.files == 4  # model, optim, extra_state, data.pt
    assert ok.bytes == sum(p.stat().st_size for p in step_dir.rglob("*.pt")) and ok.seconds > 0
    _flip_middle(shard)
    (problem,) = check_crcs(step_dir).problems
    assert problem.startswith(f"{shard} is damaged: member ")


def test_resume_sets_a_bit_flipped_newest_step_aside_and_resumes_the_previous(tmp_path, caplog):
    """The issue's case: a shard of the same size, bytes flipped in the middle; torch.load fails on it."""
    make_ckpt(tmp_path, 8, world=1)
    step12 = make_ckpt(tmp_path, 12, world=1)
    shard = _tensor_file(step12 / "actor" / "model_world_size_1_rank_0.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("12")
    record_saved(tmp_path)
    _flip_middle(shard)
    assert inspect_checkpoint(step12).complete  # sizes as recorded: only the content check sees it
    caplog.set_level("INFO")
    report = prepare_resume(tmp_path)
    assert report["resume_step"] == 8 and report["tracker_was"] == 12 and read_tracker(tmp_path) == 8
    (aside,) = report["set_aside"]
    assert Path(aside).name.startswith("global_step_12.incomplete-") and not step12.exists()
    assert report["note"].startswith(
        f"checkpoint global_step_12 set aside as {Path(aside).name}: {shard} is damaged: member "
        "model_world_size_1_rank_0/data/0 (4000000 bytes at offset "
    )
    assert report["note"].endswith(
        "Bad CRC-32 for file 'model_world_size_1_rank_0/data/0'; resuming from global_step_8"
    )
    moved = [r.getMessage() for r in caplog.records if "is incomplete or damaged" in r.getMessage()]
    assert len(moved) == 1 and "Bad CRC-32" in moved[0]
    checked = [r.getMessage() for r in caplog.records if r.getMessage().startswith("checked the CRC-32s of")]
    assert [m.split(":")[0] for m in checked] == [
        "checked the CRC-32s of global_step_12",
        "checked the CRC-32s of global_step_8",
    ]
    assert checked[0].endswith(": 1 damaged") and "GB/s)" in checked[1]


def test_resume_reads_only_the_steps_it_passes_and_leaves_older_ones(tmp_path):
    old = make_ckpt(tmp_path, 4, world=1)
    _flip_middle(_tensor_file(old / "data.pt"))  # damaged, but older than the step resumed: not read
    make_ckpt(tmp_path, 8, world=1)
    for step in (10, 12):  # both damaged: both set aside, the note names the newest
        _flip_middle(_tensor_file(make_ckpt(tmp_path, step, world=1) / "actor" / "optim_world_size_1_rank_0.pt"))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("12")
    report = prepare_resume(tmp_path)
    assert report["resume_step"] == 8 and read_tracker(tmp_path) == 8 and old.exists()
    assert len(report["set_aside"]) == 2 and report["note"].startswith("checkpoint global_step_12 set aside as ")
    assert report["note"].endswith(" (and 1 more); resuming from global_step_8")
    assert sorted(p.name.split(".")[0] for p in tmp_path.glob("global_step_*.incomplete-*")) == [
        "global_step_10",
        "global_step_12",
    ]


@pytest.mark.parametrize("moved_away", [True, False], ids=["set-aside-earlier", "never-there"])
def test_a_tracker_naming_a_step_that_is_not_there_resumes_the_newest_complete_and_is_rewritten(tmp_path, moved_away):
    """The issue's crash: FileNotFoundError 'global_step_65' -> 'global_step_65.incomplete-...', every resubmit."""
    make_ckpt(tmp_path, 60, world=1)
    make_ckpt(tmp_path, 64, world=1)
    if moved_away:
        make_ckpt(tmp_path, 65, world=1).rename(tmp_path / "global_step_65.incomplete-2026-12-04T221500")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("65")
    report = prepare_resume(tmp_path)
    assert report["resume_step"] == 64 and report["tracker_was"] == 65 and report["set_aside"] == []
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "64"
    assert not list(tmp_path.glob(".*.tmp")), "the tracker is replaced atomically (a temporary file, then rename)"
    assert report["note"] == (
        f"{tmp_path / 'latest_checkpointed_iteration.txt'} names step 65 but {tmp_path / 'global_step_65'} "
        "does not exist; resuming from global_step_64"
    )
    assert list_checkpoints(tmp_path)[-1].step == 64 and prepare_resume(tmp_path)["note"] == ""  # settled

    # verl's own reader of the tracker now finds the step the kit chose
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    assert Path(find_latest_ckpt_path(str(tmp_path))) == tmp_path / "global_step_64"

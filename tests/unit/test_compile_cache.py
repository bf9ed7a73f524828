"""The compile/graph caches of vLLM, TorchInductor and Triton live under the point's checkpoint
folder, so a resumed attempt (another node, same shared folder) finds them."""

from __future__ import annotations

from pathlib import Path

from grpokit.runtime import compile_cache


def test_each_cache_gets_its_own_folder_under_the_checkpoints(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt" / "sweep" / "000"  # not there yet: the first attempt creates it
    env = compile_cache.environment(ckpt, {})
    assert env.pop("VLLM_DISABLE_COMPILE_CACHE") == "0"  # else verl turns vLLM's compile cache off
    assert env == {
        "VLLM_CACHE_ROOT": str(ckpt / ".compile_cache" / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(ckpt / ".compile_cache" / "inductor"),
        "TRITON_CACHE_DIR": str(ckpt / ".compile_cache" / "triton"),
    }
    assert all(Path(p).is_dir() for p in env.values())


def test_a_second_attempt_gets_the_same_folders_and_keeps_their_files(tmp_path: Path) -> None:
    first = compile_cache.environment(tmp_path, {})
    (Path(first["TRITON_CACHE_DIR"]) / "kernel.cubin").write_bytes(b"x")
    assert compile_cache.environment(tmp_path, {}) == first
    assert (Path(first["TRITON_CACHE_DIR"]) / "kernel.cubin").read_bytes() == b"x"


def test_a_cache_location_the_user_set_wins(tmp_path: Path) -> None:
    env = compile_cache.environment(tmp_path, {"TRITON_CACHE_DIR": "/scratch/triton", "VLLM_CACHE_ROOT": ""})
    assert "TRITON_CACHE_DIR" not in env  # the job's own value stays in force
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / ".compile_cache" / "vllm")  # empty counts as unset
    assert not (tmp_path / ".compile_cache" / "triton").exists()


def test_vllm_compile_cache_is_turned_on_unless_the_user_set_it(tmp_path: Path) -> None:
    # verl 0.9.1 sets VLLM_DISABLE_COMPILE_CACHE=1 for its workers only when the variable is unset
    assert compile_cache.environment(tmp_path, {})["VLLM_DISABLE_COMPILE_CACHE"] == "0"
    assert "VLLM_DISABLE_COMPILE_CACHE" not in compile_cache.environment(tmp_path, {"VLLM_DISABLE_COMPILE_CACHE": "1"})

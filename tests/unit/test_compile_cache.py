"""The compile/graph caches of vLLM, TorchInductor and Triton live under the point's checkpoint
folder, so a resumed attempt (another node, same shared folder) finds them."""

from __future__ import annotations

import json
import os
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


def _point(root: Path, name: str, files: dict[str, bytes]) -> Path:
    """A point's checkpoint folder whose caches hold ``files`` (paths under .compile_cache)."""
    ckpt = root / name
    for rel, data in files.items():
        (ckpt / ".compile_cache" / rel).parent.mkdir(parents=True, exist_ok=True)
        (ckpt / ".compile_cache" / rel).write_bytes(data)
    return ckpt


def test_only_a_sibling_that_logged_a_step_is_copied_and_only_what_it_listed(tmp_path: Path) -> None:
    done = _point(tmp_path, "000", {"triton/k1/a.cubin": b"aaaa", "vllm/torch_compile_cache/h/r0/x.py": b"x"})
    _point(tmp_path, "001", {"triton/k9/b.cubin": b"bb"})  # still compiling: no COMPLETE.json
    assert compile_cache.mark_complete(done) is True
    assert compile_cache.mark_complete(done) is False  # once
    (done / ".compile_cache" / "triton" / "k1" / "late.cubin").write_bytes(b"written after the list")
    (done / ".compile_cache" / "triton" / "k1" / "a.cubin").write_bytes(b"aaaa-grown")  # no longer as listed
    new = tmp_path / "002"
    source = compile_cache.seed(new, [tmp_path / n for n in ("000", "001", "002")])
    assert source == str((done / ".compile_cache").resolve())
    copied = sorted(str(p.relative_to(new / ".compile_cache")) for p in new.rglob("*") if p.is_file())
    assert copied == ["vllm/torch_compile_cache/h/r0/x.py"]  # a.cubin changed size, late.cubin unlisted
    assert not (new / ".compile_cache" / "COMPLETE.json").exists()  # its own, once it logged a step


def test_triton_group_files_name_the_copies(tmp_path: Path) -> None:
    # Triton's FileCacheManager.put_group: {"child_paths": {name: absolute path}}, get_group keeps
    # only the children that exist at those paths
    src_root = tmp_path / "000" / ".compile_cache"
    child = src_root / "triton" / "k1" / "chunk.cubin"
    group = json.dumps({"child_paths": {"chunk.cubin": str(child)}}).encode()
    done = _point(tmp_path, "000", {"triton/k1/chunk.cubin": b"c", "triton/k1/__grp__chunk.json": group})
    compile_cache.mark_complete(done)
    new = tmp_path / "001"
    compile_cache.seed(new, [done])
    copied = json.loads((new / ".compile_cache" / "triton" / "k1" / "__grp__chunk.json").read_text())
    assert copied == {"child_paths": {"chunk.cubin": str(new / ".compile_cache" / "triton" / "k1" / "chunk.cubin")}}


def test_a_point_with_a_cache_of_its_own_or_no_complete_sibling_is_left_alone(tmp_path: Path) -> None:
    done = _point(tmp_path, "000", {"triton/k1/a.cubin": b"a"})
    compile_cache.mark_complete(done)
    own = _point(tmp_path, "001", {"triton/k2/b.cubin": b"b"})  # a resumed attempt: its own cache
    assert compile_cache.seed(own, [done, own]) is None
    assert not (own / ".compile_cache" / "triton" / "k1").exists()
    assert compile_cache.seed(tmp_path / "002", [tmp_path / "001", tmp_path / "missing"]) is None


def test_the_newest_complete_sibling_is_the_source(tmp_path: Path) -> None:
    old = _point(tmp_path, "000", {"triton/old.cubin": b"o"})
    new = _point(tmp_path, "001", {"triton/new.cubin": b"n"})
    compile_cache.mark_complete(old)
    compile_cache.mark_complete(new)
    os.utime(old / ".compile_cache" / "COMPLETE.json", (1, 1))
    target = tmp_path / "002"
    assert compile_cache.seed(target, [old, new]) == str((new / ".compile_cache").resolve())
    assert (target / ".compile_cache" / "triton" / "new.cubin").exists()

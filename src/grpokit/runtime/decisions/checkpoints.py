"""Which of verl's FSDP checkpoints under ``trainer.default_local_dir`` are complete.

Layout (verl 0.9.1, ``verl/trainer/ppo/ray_trainer.py::_save_checkpoint`` and
``verl/utils/checkpoint/fsdp_checkpoint_manager.py::save_checkpoint``)::

    <ckpt_dir>/latest_checkpointed_iteration.txt      N, written last (skipped with async_save)
    <ckpt_dir>/global_step_N/data.pt                  dataloader state, written after the actor
    <ckpt_dir>/global_step_N/actor/model_world_size_W_rank_R.pt        every rank R < W
    <ckpt_dir>/global_step_N/actor/optim_world_size_W_rank_R.pt
    <ckpt_dir>/global_step_N/actor/extra_state_world_size_W_rank_R.pt
    <ckpt_dir>/global_step_N/actor/fsdp_config.json   {"FSDP_version": 1|2, "world_size": W} (rank 0)
    <ckpt_dir>/global_step_N/actor/huggingface/config.json  model config + tokenizer (rank 0)

A job killed during a save leaves a ``global_step_N`` without some of these; the tracker file can
still name a step whose folder was pruned or is partial. A file can also be there but damaged (a
0-byte or truncated shard: a full disk, a copy cut short, a hand-made ``truncate``). So complete means
by content too:

- with the kit's manifest ``global_step_N/.grpokit-sizes.json`` (:func:`record_saved`, written by the
  job's driver once verl's tracker names the step, i.e. after verl's save returned), every file it
  lists has the size recorded there;
- without one (the driver died before it saw the save), each file passes a header check that reads
  no tensor: ``*.pt`` is torch's zip archive (``torch.save`` since torch 1.6; its central directory,
  at the end of the file, lists a ``data.pkl``: a truncated or zeroed archive has none) or a legacy
  pickle, ``*.safetensors`` has its 8-byte header length, a JSON header, and exactly the bytes its
  ``data_offsets`` end at; no file is empty.

Neither reads a tensor, so a shard of the right size with bytes flipped in the middle passes both;
``torch.load`` does not catch it either (it reads tensor data without its CRC-32: the weights or Adam
moments change silently; only a flip inside the pickle makes it fail). The step chosen to resume is
therefore also checked by content with the integrity data torch.save already writes
(:func:`check_crcs`, called by :mod:`grpokit.runtime.decisions.resume_from`): every member of its zip
archive carries a CRC-32 of its bytes, and every member of every ``*.pt`` is read and compared (a
whole read of the step: about 10 GB for the reference run's world-size-1 Qwen3.5-0.8B actor;
``bench/bench_checkpoint_check.py`` measures it). Nothing extra is written at save time.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")
SHARD_RE = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")
SHARD_KINDS = ("model", "optim", "extra_state")
#: The kit's record of each file's size at save time, inside ``global_step_N``.
MANIFEST = ".grpokit-sizes.json"


@dataclass(frozen=True)
class CheckpointInfo:
    """One ``global_step_N`` folder.

    step: N. path: the ``global_step_N`` folder. complete: every file listed in the module
    docstring is present and intact (its recorded size, else its header). problems: human-readable
    reasons when not complete (empty when complete).
    world_size: W read from fsdp_config.json, else from the shard names (None when neither).
    tracked: the tracker file names this step.
    """

    step: int
    path: Path
    complete: bool
    problems: list[str] = field(default_factory=list)
    world_size: int | None = None
    tracked: bool = False

    @property
    def actor_dir(self) -> Path:
        """The folder verl's model merger reads (``--local_dir``)."""
        return self.path / "actor"


def read_tracker(ckpt_dir: Path | str) -> int | None:
    """The step in ``latest_checkpointed_iteration.txt``; None when absent or not an integer."""
    path = Path(ckpt_dir) / TRACKER_FILE
    if not path.exists():
        return None
    text = path.read_text().strip()
    try:
        return int(text)
    except ValueError:
        log.warning("%s holds %r, not a step number", path, text)
        return None


def _check_actor(actor: Path) -> tuple[list[str], int | None]:
    """Problems found in ``global_step_N/actor`` and the world size used."""
    if not actor.is_dir():
        return [f"missing {actor}"], None
    problems: list[str] = []
    shards: dict[tuple[str, int], set[int]] = {}
    for p in actor.iterdir():
        m = SHARD_RE.match(p.name)
        if m:
            shards.setdefault((m.group(1), int(m.group(2))), set()).add(int(m.group(3)))

    cfg_world: int | None = None
    cfg_path = actor / "fsdp_config.json"
    if cfg_path.exists():
        try:
            cfg_world = int(json.loads(cfg_path.read_text())["world_size"])
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{cfg_path} has no readable world_size ({exc!r})")
    else:
        # The merger reads world_size from this file (verl/model_merger/fsdp_model_merger.py).
        problems.append(f"missing {cfg_path}")

    name_worlds = sorted({w for (_, w) in shards})
    if cfg_world is not None:
        world = cfg_world
        stray = [w for w in name_worlds if w != cfg_world]
        if stray:
            problems.append(f"shards for world size {stray} next to fsdp_config.json's world_size {cfg_world}")
    elif len(name_worlds) == 1:
        world = name_worlds[0]
    else:
        if name_worlds:
            problems.append(f"shards of several world sizes {name_worlds} and no fsdp_config.json")
        else:
            problems.append(f"no model/optim/extra_state shard files in {actor}")
        return problems, None

    for kind in SHARD_KINDS:
        have = shards.get((kind, world), set())
        missing = [r for r in range(world) if r not in have]
        if missing:
            problems.append(f"missing {kind}_world_size_{world}_rank_R.pt for ranks {missing} in {actor}")
    if not (actor / "huggingface" / "config.json").exists():
        problems.append(f"missing {actor / 'huggingface' / 'config.json'} (written by rank 0 on every save)")
    return problems, world


def torch_file_problem(path: Path) -> str | None:
    """Why ``path`` is not a loadable torch file, from its header and zip directory only; None when it is.

    torch.save writes a zip archive (``<name>/data.pkl`` plus one entry per tensor storage; torch's
    ``serialization.py``); its central directory is at the end, so a truncated or zeroed file has none.
    A legacy (pre-1.6) file is a pickle stream (first byte 0x80): accepted when not empty.
    """
    size = path.stat().st_size
    if size == 0:
        return f"{path} is empty (0 bytes)"
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head.startswith(b"\x80"):
        return None
    if not head.startswith(b"PK\x03\x04"):
        return f"{path} is not a torch file (neither torch.save's zip archive nor a pickle; {size} bytes)"
    try:
        with zipfile.ZipFile(path) as zf:
            entries = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return f"{path} is a damaged torch file ({size} bytes, truncated?): {exc}"
    if not any(e.filename.endswith("/data.pkl") or e.filename == "data.pkl" for e in entries):
        return f"{path} is a zip archive without torch's data.pkl"
    end = max((e.header_offset + e.compress_size for e in entries), default=0)
    if end > size:
        return f"{path} is truncated: its zip directory needs {end} bytes, the file has {size}"
    return None


#: Read size of the CRC check (one buffer per file; large reads keep Python's overhead per byte low).
CRC_CHUNK = 16 << 20


def torch_file_crc_problem(path: Path) -> str | None:
    """Why ``path``'s bytes are not the ones torch.save wrote, by the CRC-32 of each zip member; None when intact.

    torch.save's zip writer (miniz, torch's ``serialization.py``) records a CRC-32 of every member
    (``data.pkl``, one ``data/<key>`` per tensor storage, ...) in the archive's directory; every member is
    read in full (``CRC_CHUNK`` bytes at a time) and its CRC-32 compared, as ``zipfile.ZipFile.testzip``
    does, but naming the member, its offset and the error. Cost: one read of the file (the figures:
    ``bench/bench_checkpoint_check.py``).

    Files that carry no CRC-32 are accepted (None), for the header checks to judge: a legacy pickle
    (first byte 0x80), or an archive saved under ``torch.serialization.set_crc32_options(False)``,
    where every member's recorded CRC-32 is 0.

    Returns:
        ``"<path> is damaged: member <name> (<bytes> bytes at offset <o>): <why>"``, or another one-line
        reason (not a zip archive, unreadable directory, empty); None when intact or not checkable.
    """
    size = path.stat().st_size
    if size == 0:
        return f"{path} is empty (0 bytes)"
    with open(path, "rb") as fh:
        if fh.read(1) == b"\x80":
            return None
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, struct.error) as exc:
        return f"{path} is a damaged torch file ({size} bytes): {exc}"
    with zf:
        members = zf.infolist()
        if all(m.CRC == 0 for m in members if m.file_size > 0):
            log.info("%s carries no CRC-32s (saved with torch.serialization.set_crc32_options(False))", path)
            return None
        for m in members:
            try:
                with zf.open(m) as fh:
                    while fh.read(CRC_CHUNK):
                        pass
            except (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError, struct.error) as exc:
                where = f"{m.file_size} bytes at offset {m.header_offset}"
                return f"{path} is damaged: member {m.filename} ({where}): {exc}"
    return None


@dataclass(frozen=True)
class CrcCheck:
    """What :func:`check_crcs` found in one ``global_step_N``.

    problems: one line per damaged ``*.pt`` (empty when all are intact). files: ``*.pt`` files read.
    bytes: their total size. seconds: wall time of the check.
    """

    problems: list[str]
    files: int
    bytes: int
    seconds: float


def check_crcs(step_dir: Path | str) -> CrcCheck:
    """Read every ``*.pt`` under ``step_dir`` (data.pt, the actor's and any critic's shards) and check its CRC-32s.

    The content check of the step a job is about to resume (:func:`torch_file_crc_problem` per file).
    Other files (``fsdp_config.json``, ``huggingface/``: not loaded on resume; safetensors carry no
    checksum) keep the size and header checks of :func:`inspect_checkpoint`.
    """
    step_dir = Path(step_dir)
    t0 = time.perf_counter()
    files = [p for p in _files(step_dir) if p.suffix == ".pt"]
    problems = [why for p in files if (why := torch_file_crc_problem(p))]
    total = sum(p.stat().st_size for p in files if p.exists())
    return CrcCheck(problems=problems, files=len(files), bytes=total, seconds=time.perf_counter() - t0)


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (header length, JSON header, data size); None when it is.

    Format (huggingface/safetensors README): u64 little-endian N, N bytes of JSON
    ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": ...}``, then the data.
    """
    size = path.stat().st_size
    if size < 8:
        return f"{path} is too short for a safetensors file ({size} bytes)"
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if 8 + n > size:
            return f"{path} is truncated: its header says {n} bytes, the file has {size}"
        try:
            header = json.loads(fh.read(n))
        except ValueError as exc:
            return f"{path} has an unreadable safetensors header: {exc}"
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    want = 8 + n + max(ends, default=0)
    if want != size:
        return f"{path} is truncated: its header needs {want} bytes, the file has {size}"
    return None


def _files(step_dir: Path) -> list[Path]:
    """Every regular file under ``step_dir`` but the manifest, sorted."""
    return sorted(p for p in step_dir.rglob("*") if p.is_file() and p.name != MANIFEST)


def content_problems(step_dir: Path) -> list[str]:
    """Damaged files of ``global_step_N``: by the sizes in its manifest, else by header checks."""
    manifest = step_dir / MANIFEST
    if manifest.exists():
        try:
            sizes = json.loads(manifest.read_text())["files"]
        except (ValueError, KeyError, TypeError, OSError) as exc:
            log.warning("%s is unreadable (%r): checking file headers instead", manifest, exc)
        else:
            problems = []
            for rel, size in sorted(sizes.items()):
                path = step_dir / rel
                if not path.exists():
                    problems.append(f"missing {path} ({size} bytes at save)")
                elif (have := path.stat().st_size) != size:
                    problems.append(f"{path} has {have} bytes, {size} at save ({MANIFEST})")
            return problems
    problems = []
    for path in _files(step_dir):
        if path.suffix == ".pt":
            why = torch_file_problem(path)
        elif path.suffix == ".safetensors":
            why = safetensors_problem(path)
        else:
            why = f"{path} is empty (0 bytes)" if path.stat().st_size == 0 else None
        if why:
            problems.append(why)
    return problems


def record_saved(ckpt_dir: Path | str, seen: int | None = None) -> int | None:
    """Write the manifest of the step the tracker names, once verl's save of it is over.

    verl writes ``latest_checkpointed_iteration.txt`` after every file of the step (module
    docstring), so when the tracker names N, ``global_step_N`` is whole: its files' sizes are
    recorded in ``global_step_N/.grpokit-sizes.json`` (``{"step": N, "files": {relative path:
    bytes}}``), after the header checks pass (a step already damaged gets no manifest). Cheap when
    nothing changed: one read of the tracker. Never raises (a failure is logged; the header checks
    remain).

    Args:
        ckpt_dir: verl's ``trainer.default_local_dir``.
        seen: the step this returned last time (nothing is done while the tracker still names it).

    Returns:
        The tracker's step (None when there is none).
    """
    ckpt_dir = Path(ckpt_dir)
    try:
        step = read_tracker(ckpt_dir)
        if step is None or step == seen:
            return step
        step_dir = ckpt_dir / f"global_step_{step}"
        if not step_dir.is_dir() or (step_dir / MANIFEST).exists():
            return step
        info = inspect_checkpoint(step_dir)
        if not info.complete:
            log.warning("checkpoint %s is not whole after its save: %s", step_dir, "; ".join(info.problems))
            return step
        files = {str(p.relative_to(step_dir)): p.stat().st_size for p in _files(step_dir)}
        tmp = step_dir / f".{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"step": step, "files": files}))
        os.replace(tmp, step_dir / MANIFEST)
        log.info("checkpoint %s saved: %d files, %d bytes recorded", step_dir, len(files), sum(files.values()))
    except OSError as exc:
        log.warning("could not record the sizes of the checkpoint named by %s: %s", ckpt_dir / TRACKER_FILE, exc)
        return seen
    return step


def inspect_checkpoint(step_dir: Path | str, tracked: bool = False) -> CheckpointInfo:
    """Check one ``global_step_N`` folder (see the module docstring for what complete means)."""
    step_dir = Path(step_dir)
    m = STEP_DIR_RE.match(step_dir.name)
    if not m:
        raise ValueError(f"{step_dir}: not a verl checkpoint folder (expected global_step_N)")
    problems, world = _check_actor(step_dir / "actor")
    if not (step_dir / "data.pt").exists():
        problems.insert(0, f"missing {step_dir / 'data.pt'} (the dataloader state, saved after the actor)")
    if step_dir.is_dir():
        problems.extend(p for p in content_problems(step_dir) if p not in problems)
    return CheckpointInfo(
        step=int(m.group(1)),
        path=step_dir,
        complete=not problems,
        problems=problems,
        world_size=world,
        tracked=tracked,
    )


def list_checkpoints(ckpt_dir: Path | str) -> list[CheckpointInfo]:
    """Every ``global_step_N`` under ``ckpt_dir`` (a run folder's ``checkpoints``), sorted by step.

    When the tracker file names a step whose folder is missing, an entry with complete=False and
    the problem spelled out is included, so callers can report it. A missing ``ckpt_dir`` gives [].
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    tracked = read_tracker(ckpt_dir)
    infos = [
        inspect_checkpoint(p, tracked=(tracked == int(STEP_DIR_RE.match(p.name).group(1))))
        for p in ckpt_dir.iterdir()
        if p.is_dir() and STEP_DIR_RE.match(p.name)
    ]
    if tracked is not None and all(i.step != tracked for i in infos):
        missing = ckpt_dir / f"global_step_{tracked}"
        infos.append(
            CheckpointInfo(
                step=tracked,
                path=missing,
                complete=False,
                tracked=True,
                problems=[f"{ckpt_dir / TRACKER_FILE} names step {tracked} but {missing} does not exist"],
            )
        )
    for info in infos:
        if info.tracked and not info.complete:
            log.warning(
                "tracker file of %s points at incomplete step %d: %s",
                ckpt_dir,
                info.step,
                "; ".join(info.problems),
            )
    return sorted(infos, key=lambda i: i.step)


def latest_complete(ckpt_dir: Path | str) -> CheckpointInfo | None:
    """The complete checkpoint with the highest step, or None when there is none."""
    complete = [i for i in list_checkpoints(ckpt_dir) if i.complete]
    return complete[-1] if complete else None

"""A sweep folder (``<logs_root>/<sweep_name>/``) is claimed atomically and never re-used silently.

A real sweep (not a dry run) owns its folder once it has created ``submissions.jsonl`` in it with
``O_CREAT | O_EXCL``: of two commands that want the same folder, exactly one succeeds. The loser
takes the next free name when the name is the generated default (``<experiment>_<time>`` ->
``<experiment>_<time>-2``), and is refused otherwise. An existing sweep is re-used only by an
explicit resume (``resume=true``), which locks ``submissions.jsonl`` (``flock``) while it picks
and submits points, so two resumes of one folder never submit the same point twice.

A folder holding only a dry run's files (``dry_run.md``, its manifest) is not claimed: a later
real sweep of the same name takes it over.

``submissions.jsonl``: one JSON line per submission into the folder, appended, never rewritten:
``{"time", "kind": "new"|"resume"|"resubmit", "command": str, "points": [name],
"job_ids": [str|null]}``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpokit.run_folder.atomic import now
from grpokit.run_folder.layout import DRY_RUN, MANIFEST, SUBMISSIONS
from grpokit.run_folder.locate import nearest_hint

#: What a dry run (or Hydra's sweeper, before the kit moved it to ``logs/.hydra``) leaves in a folder.
_DRY_RUN_ONLY = {DRY_RUN, MANIFEST, "multirun.yaml"}
_MAX_SUFFIX = 1000


class SweepFolderError(Exception):
    """The sweep folder cannot be used as asked; the message is one line and says what to do."""


def is_generated(raw_name: str) -> bool:
    """Whether a ``sweep_name`` as written (unresolved) is the time-stamped default (``${now:...}``)."""
    return "${now:" in raw_name


def check_name(name: str) -> None:
    """A sweep name is one folder name: no ``/``, not empty, not hidden.

    Raises:
        SweepFolderError: the name would put the sweep somewhere else.
    """
    if not name or "/" in name or name.startswith(".") or name != name.strip():
        raise SweepFolderError(
            f"sweep_name={name!r} is not a folder name; nothing was submitted. "
            "Use letters, digits, '-', '_' or '.' (not first), no '/'."
        )


def folder_state(path: Path) -> str:
    """``absent`` | ``free`` (empty, or a dry run's files only) | ``sweep`` (a submitted sweep)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return "absent"
    if not path.is_dir() or (path / SUBMISSIONS).exists():
        return "sweep"
    entries = {p.name for p in path.iterdir()}
    if entries <= _DRY_RUN_ONLY and (MANIFEST not in entries or DRY_RUN in entries):
        return "free"
    return "sweep"  # a sweep folder written before submissions.jsonl existed


def never_submitted(path: Path) -> bool:
    """A folder a sweep command claimed but never submitted from: an empty ``submissions.jsonl``, no
    manifest, and no sweep command holding it now (what a failure before submission left, before such
    failures removed their folder; a claim in progress holds its ``flock``)."""
    sub = Path(path) / SUBMISSIONS
    try:
        st = sub.stat()
        # seconds old at least: a claim made this instant may not hold its lock yet (open, then flock)
        if st.st_size != 0 or time.time() - st.st_mtime < 10 or (Path(path) / MANIFEST).exists():
            return False
        fd = os.open(sub, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return False  # its owner is submitting right now
    finally:
        os.close(fd)
    return True


def exists_message(path: Path) -> str:
    if never_submitted(path):
        return (
            f"sweep folder {path} was claimed by an earlier sweep command that failed before submitting "
            f"(an empty {SUBMISSIONS}, no {MANIFEST}); nothing was submitted there or now. Remove it "
            f"(rm -r {path}) and run the same command again, or choose another sweep_name=."
        )
    return (
        f"sweep folder {path} already exists (a sweep was submitted there); nothing was submitted. "
        "Add resume=true to resubmit its unfinished points with the same settings, or choose another "
        "sweep_name= (leave it out for a new <experiment>_<time> folder)."
    )


def check_before_validation(path: Path, *, resume: bool, generated: bool) -> None:
    """Refuse at once what the claim would refuse after validation (so the user does not wait).

    Raises:
        SweepFolderError: ``resume`` without a folder to resume (the message names the nearest
            sweeps under the same logs root, as the commands that take a sweep's name do); an
            explicit name that is taken.
    """
    state = folder_state(path)
    if resume and state == "sweep" and never_submitted(path):
        raise SweepFolderError(exists_message(path))
    if resume and state == "absent":
        near = nearest_hint(Path(path).name, Path(path).parent).removeprefix("; ")
        raise SweepFolderError(
            f"resume=true: there is no sweep folder {path} to resume ({near}); nothing was submitted. "
            "Check sweep_name= and logs_root=, or drop resume=true to start a new sweep."
        )
    if not resume and not generated and state == "sweep":
        raise SweepFolderError(exists_message(path))


@dataclass
class Claim:
    """A sweep folder this process owns until :meth:`release` (an open, locked ``submissions.jsonl``).

    path: the folder. name: its final name (the generated default may have a ``-N`` suffix).
    resumed: an existing sweep re-used by ``resume=true``. created: this claim made the folder
    (a new sweep in an absent folder). before: the entries the folder held when claimed (a new
    sweep taking over a dry run's folder: its files). submissions_size: bytes of ``submissions.jsonl``
    when claimed (what an undone submission truncates it back to).
    """

    path: Path
    name: str
    resumed: bool
    _fd: int | None = None
    created: bool = False
    before: frozenset[str] = frozenset()
    submissions_size: int = 0

    def record(self, kind: str, points: list[str], job_ids: list[str | None], **extra: Any) -> None:
        """Append one submission line to ``submissions.jsonl`` (flushed to disk).

        Raises:
            OSError: it could not be written (a full disk: ENOSPC, also for a short write); the file
                is truncated back, so no half line is left.
        """
        line = {
            "time": now(),
            "kind": kind,
            "command": " ".join(sys.argv),
            "points": points,
            "job_ids": job_ids,
            **extra,
        }
        assert self._fd is not None, "record() after release()"
        end = os.lseek(self._fd, 0, os.SEEK_END)
        payload = (json.dumps(line, default=str) + "\n").encode()
        try:
            if os.write(self._fd, payload) < len(payload):  # a short write: the disk filled up under it
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path / SUBMISSIONS))
            os.fsync(self._fd)
        except OSError:  # a full disk: no half line is left for readers of the file
            os.ftruncate(self._fd, end)
            raise

    def release(self) -> None:
        """Drop the lock (closing the file); idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _locked(path: Path, flags: int) -> int:
    fd = os.open(path, flags | os.O_WRONLY | os.O_APPEND, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def open_existing(path: Path) -> Claim:
    """Lock an existing sweep folder for a resume or a resubmission (waits for another holder).

    Raises:
        SweepFolderError: the folder has no manifest (nothing recorded to resume).
    """
    path = Path(path)
    fd = _locked(path / SUBMISSIONS, os.O_CREAT)
    if not (path / MANIFEST).exists():
        os.close(fd)
        raise SweepFolderError(
            f"{path} has no {MANIFEST}: no submitted points are recorded there; nothing was submitted. "
            "Choose another sweep_name= for a new sweep."
        )
    return Claim(path=path, name=path.name, resumed=True, _fd=fd, submissions_size=os.fstat(fd).st_size)


def dry_run_folder(logs_root: Path, name: str, *, generated: bool) -> Path:
    """The folder a dry run writes to: ``<logs_root>/<name>`` unless a submitted sweep holds it
    (then, for a generated name, the next free ``<name>-N``). Created if absent; never claimed.

    Raises:
        SweepFolderError: an explicit name holds a submitted sweep (the real run would be refused).
    """
    check_name(name)
    for candidate in _candidates(Path(logs_root), name, generated):
        path = Path(logs_root) / candidate
        if folder_state(path) != "sweep":
            path.mkdir(parents=True, exist_ok=True)
            return path
        if not generated:
            raise SweepFolderError(exists_message(path))
    raise SweepFolderError(f"no free sweep folder {logs_root}/{name}-N (N < {_MAX_SUFFIX}); nothing was written.")


def _candidates(logs_root: Path, name: str, generated: bool):
    yield name
    if generated:
        for k in range(2, _MAX_SUFFIX):
            yield f"{name}-{k}"


def claim(logs_root: Path, name: str, *, generated: bool, resume: bool) -> Claim:
    """Own ``<logs_root>/<name>`` (or, for a generated name, the first free ``<name>-N``).

    A folder that is absent or holds only a dry run is claimed new. An existing sweep is
    re-used (locked, ``resumed=True``) only with ``resume``; otherwise an explicit name is refused.

    Raises:
        SweepFolderError: the name is taken (explicit name, no resume), or resume finds nothing.
        OSError: the folder or ``submissions.jsonl`` could not be created (a full disk: ENOSPC,
            EDQUOT); a folder this call made is removed first.
    """
    check_name(name)
    logs_root = Path(logs_root)
    logs_root.mkdir(parents=True, exist_ok=True)
    for candidate in _candidates(logs_root, name, generated):
        path = logs_root / candidate
        state = folder_state(path)
        if state == "sweep":
            if resume:
                return open_existing(path)
            if generated:
                continue
            raise SweepFolderError(exists_message(path))
        if resume and state == "absent":
            check_before_validation(path, resume=True, generated=generated)
        created = False
        try:
            try:
                path.mkdir()
                created = True
            except FileExistsError:
                pass
            before = frozenset(p.name for p in path.iterdir())
            fd = _locked(path / SUBMISSIONS, os.O_CREAT | os.O_EXCL)
        except (FileExistsError, NotADirectoryError):
            # another sweep command claimed it between our look and our create
            if resume:
                return open_existing(path)
            if generated:
                continue
            raise SweepFolderError(exists_message(path)) from None
        except OSError:  # a full disk (ENOSPC, EDQUOT): the folder this claim made is not left behind
            if created:
                shutil.rmtree(path, ignore_errors=True)
            raise
        return Claim(path=path, name=candidate, resumed=False, _fd=fd, created=created, before=before)
    raise SweepFolderError(f"no free sweep folder {logs_root}/{name}-N (N < {_MAX_SUFFIX}); nothing was submitted.")

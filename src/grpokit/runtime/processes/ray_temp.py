"""Ray's temp dir on a node: inside a folder only the job's user can enter, recorded with the pids that
use it, removed by the next start on the node once those processes are gone.

Ray makes its temp dir and every folder under it mode 777 (``ray._common.utils.try_to_create_directory``
chmods each one after creating it: a convention of the shared ``/tmp/ray``), and a ``chmod`` is not
limited by the umask. Given the job's own folder as ``--temp-dir``, that folder was open to every
user for the 6-9 s of Ray's start (another user put files into it and into its ``session_*``).
Now Ray gets ``<root>/rk<random>/r``: ``<root>/rk<random>`` is made by ``tempfile.mkdtemp``
(``os.mkdir(path, 0o700)``: private from its creation, never chmodded by Ray), so whatever mode Ray
gives ``r`` and the folders below it, no other user can reach them.

A killed attempt (SIGKILL, a node failure) cannot remove its folder. Each folder holds ``owner.json``
(:data:`RECORD`: the uid, the host and the pids with their start times: the job process that made it
and its ``ray start``); :func:`new_temp_dir` first removes this user's folders whose recorded
processes have all ended (:func:`sweep`). A folder of another user, a symlink, a folder without a
record (being made, or an older kit's) or with a live recorded process is never touched.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

PREFIX = "rk"
#: Ray's temp dir inside the private folder (short: Ray's socket paths must stay under 107 bytes).
RAY_DIR = "r"
RECORD = "owner.json"
#: Where the private folder goes: the first writable one (short paths; TMPDIR is ignored on purpose,
#: clusters set it to long per-job paths).
ROOTS = ("/tmp", "/dev/shm")


class NoTempDirError(RuntimeError):
    """No writable short folder for Ray's temp dir."""


def start_time(pid: int) -> float | None:
    """The process's start time (``psutil`` ``create_time``, seconds since the epoch); None when gone."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def new_temp_dir(roots: tuple[str, ...] = ROOTS) -> Path:
    """Ray's ``--temp-dir`` for a new start: ``<root>/rk<random>/r`` (``r`` not made; Ray makes it).

    ``<root>/rk<random>`` is private (0700) from its creation and records this process. Earlier
    folders of this user in ``<root>`` whose processes have ended are removed first (:func:`sweep`).

    Raises:
        NoTempDirError: none of ``roots`` (nor the system temp dir) is a writable short path.
    """
    for root in (*roots, tempfile.gettempdir()):
        if os.access(root, os.W_OK) and len(root) < 40:
            sweep(Path(root))
            private = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))  # os.mkdir(path, 0o700)
            record(private, [os.getpid()])
            return private / RAY_DIR
    raise NoTempDirError(f"no writable short temp dir ({', '.join(roots)}) for Ray's sockets")


def private_folder(temp_dir: Path) -> Path | None:
    """The private folder around Ray's ``temp_dir`` (None when ``temp_dir`` is not one of :func:`new_temp_dir`)."""
    parent = temp_dir.parent
    return parent if temp_dir.name == RAY_DIR and parent.name.startswith(PREFIX) else None


def record(private: Path, pids: list[int]) -> None:
    """Write ``private``'s :data:`RECORD` naming ``pids`` (with their start times; atomically)."""
    data = {
        "uid": os.getuid(),
        "host": socket.gethostname(),
        "pids": {str(p): start_time(p) for p in pids},
    }
    tmp = private / f".{RECORD}.{os.getpid()}"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, private / RECORD)


def add_pid(temp_dir: Path, pid: int) -> None:
    """Add ``pid`` (the ``ray start`` process) to the record of ``temp_dir``'s private folder (never
    raises: a failed write is logged)."""
    private = private_folder(temp_dir)
    if private is None:
        return
    try:
        pids = [int(p) for p in json.loads((private / RECORD).read_text())["pids"]]
    except (OSError, ValueError, KeyError, TypeError):
        pids = [os.getpid()]
    try:
        record(private, [*pids, pid])
    except OSError as exc:  # the job process alone keeps the folder from a sweep meanwhile
        log.warning("could not record ray start's pid %d in %s: %s", pid, private / RECORD, exc)


def remove(temp_dir: Path) -> None:
    """Remove Ray's ``temp_dir`` with its private folder (the folder only when it is one of :func:`new_temp_dir`)."""
    shutil.rmtree(private_folder(temp_dir) or temp_dir, ignore_errors=True)


def is_stale(data: dict, *, uid: int, host: str, started: Callable[[int], float | None] = start_time) -> bool:
    """Whether a folder's record says it is a finished start of this user on this host: every
    recorded pid has ended (gone, or the pid now belongs to a process started at another time).

    A record of another uid or host, or one without pids, is never stale (not ours to judge)."""
    if not isinstance(data, dict):
        return False
    pids = data.get("pids")
    if data.get("uid") != uid or data.get("host") != host or not isinstance(pids, dict) or not pids:
        return False
    for pid, when in pids.items():
        now = started(int(pid))
        if now is not None and (when is None or abs(now - float(when)) < 1.0):
            return False
    return True


def sweep(root: Path) -> list[Path]:
    """Remove this user's stale private folders in ``root`` (:func:`is_stale`); returns those removed.

    Only real folders named ``rk*`` owned by this user are read; the rest is left as it is."""
    uid, host = os.getuid(), socket.gethostname()
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
                continue
            data = json.loads((Path(entry.path) / RECORD).read_text())
        except (OSError, ValueError):
            continue
        if is_stale(data, uid=uid, host=host):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    if removed:
        log.info("removed the Ray temp folders of this user's ended starts on this node: %s", [str(p) for p in removed])
    return removed

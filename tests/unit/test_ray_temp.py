"""Ray's temp dir on a shared node (issue 36 item 4): private from its creation, recorded, and removed
by the next start once its processes are gone (real folders, real processes)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grpokit.runtime.processes import ray_temp

OTHER_UID = 12345


@pytest.fixture
def root():
    """A short folder standing in for /tmp (Ray's socket paths need a short one)."""
    path = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _ended_pid() -> tuple[int, float]:
    """A pid and start time of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = ray_temp.start_time(proc.pid)
    proc.wait()
    return proc.pid, started or 1.0


def _folder(root: Path, name: str, pids: dict, uid: int | None = None, host: str | None = None) -> Path:
    path = root / name
    (path / ray_temp.RAY_DIR / "session_x").mkdir(parents=True)
    record = {"uid": os.getuid() if uid is None else uid, "host": host or socket.gethostname(), "pids": pids}
    (path / ray_temp.RECORD).write_text(json.dumps(record))
    return path


def test_the_folder_around_rays_temp_dir_is_private_from_its_creation(root, monkeypatch):
    made: list[tuple[str, int]] = []
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, *a, **k):  # what mkdtemp asks the kernel for, seen as it happens
        real_mkdir(path, mode, *a, **k)
        made.append((os.fspath(path), stat.S_IMODE(os.lstat(path).st_mode)))

    monkeypatch.setattr(os, "mkdir", mkdir)
    temp_dir = ray_temp.new_temp_dir(roots=(str(root),))
    monkeypatch.undo()
    private = temp_dir.parent
    assert made == [(str(private), 0o700)], "made with mode 700 in one step, never wider"
    assert temp_dir.name == "r" and private.parent == root and len(str(temp_dir)) < 40
    st = os.lstat(private)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    record = json.loads((private / ray_temp.RECORD).read_text())
    assert record["uid"] == os.getuid() and record["host"] == socket.gethostname()
    assert list(record["pids"]) == [str(os.getpid())]
    assert not temp_dir.exists(), "Ray makes its own dir (and chmods it 777) inside the private one"


def test_ray_opening_its_dir_opens_nothing_to_another_user(root):
    """What Ray does to its temp dir (mkdir, chmod 777 on it and on session_*), then another uid tries."""
    temp_dir = ray_temp.new_temp_dir(roots=(str(root),))
    session = temp_dir / "session_1"
    session.mkdir(parents=True)
    for d in (temp_dir, session):
        os.chmod(d, 0o777)
    if os.geteuid() != 0:
        pytest.skip("acting as another uid needs root")
    result = {}
    for target in (temp_dir, session):
        pid = os.fork()
        if pid == 0:  # the other user
            try:
                os.setgid(OTHER_UID)
                os.setuid(OTHER_UID)
                (target / "planted").write_text("x")
                os._exit(0)
            except PermissionError:
                os._exit(13)
            except BaseException:
                os._exit(1)
        result[target.name] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert result == {"r": 13, "session_1": 13}, "another uid could write into Ray's folders"


def test_a_start_removes_only_this_users_ended_folders(root):
    dead_pid, dead_start = _ended_pid()
    me = {str(os.getpid()): ray_temp.start_time(os.getpid())}
    ended = _folder(root, "rkended", {str(dead_pid): dead_start})
    _folder(root, "rkreused", {str(os.getpid()): 1.0})  # the pid now belongs to another process
    live = _folder(root, "rklive", me)
    half = _folder(root, "rkhalf", {str(dead_pid): dead_start, **me})  # ray start ended, the job still runs
    theirs = _folder(root, "rktheirs", {str(dead_pid): dead_start})
    if os.geteuid() == 0:
        os.chown(theirs, OTHER_UID, OTHER_UID)
    elsewhere = _folder(root, "rkelsewhere", {str(dead_pid): dead_start}, host="another-node")
    other_record = _folder(root, "rkotheruid", {str(dead_pid): dead_start}, uid=OTHER_UID)
    unrecorded = root / "rkunrecorded"
    (unrecorded / "r").mkdir(parents=True)
    link = root / "rklink"
    link.symlink_to(ended)
    not_ours = _folder(root, "other-name", {str(dead_pid): dead_start})

    temp_dir = ray_temp.new_temp_dir(roots=(str(root),))

    left = {p.name for p in root.iterdir()}
    assert "rkended" not in left and "rkreused" not in left
    kept = {live, half, elsewhere, other_record, unrecorded, not_ours, temp_dir.parent}
    kept |= {theirs} if os.geteuid() == 0 else set()
    assert {p.name for p in kept} <= left
    assert link.is_symlink(), "a symlink is never followed nor removed"
    assert ray_temp.sweep(root) == [], "the new start's own folder is live"


def test_a_record_names_the_ray_start_process_too(root):
    temp_dir = ray_temp.new_temp_dir(roots=(str(root),))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ray_temp.add_pid(temp_dir, child.pid)
        pids = json.loads((temp_dir.parent / ray_temp.RECORD).read_text())["pids"]
        assert set(pids) == {str(os.getpid()), str(child.pid)}
        data = {"uid": os.getuid(), "host": socket.gethostname(), "pids": {str(child.pid): pids[str(child.pid)]}}
        assert not ray_temp.is_stale(data, uid=os.getuid(), host=socket.gethostname())
    finally:
        child.kill()
        child.wait()
    assert ray_temp.is_stale(data, uid=os.getuid(), host=socket.gethostname())


@pytest.mark.parametrize(
    "data",
    [{}, {"uid": 0}, {"uid": os.getuid(), "host": socket.gethostname(), "pids": {}}, [1], None],
)
def test_a_record_without_pids_is_never_stale(data):
    assert not ray_temp.is_stale(data, uid=os.getuid(), host=socket.gethostname())


def test_removing_rays_temp_dir_removes_the_private_folder(root):
    temp_dir = ray_temp.new_temp_dir(roots=(str(root),))
    (temp_dir / "session_x").mkdir(parents=True)
    ray_temp.remove(temp_dir)
    assert list(root.iterdir()) == []
    plain = root / "plain"  # a dir not made by new_temp_dir: only itself
    plain.mkdir()
    ray_temp.remove(plain)
    assert list(root.iterdir()) == []

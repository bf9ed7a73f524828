"""A full disk under the commands that write a sweep folder (issue 36.2), on a real full file system.

Each test mounts a small tmpfs (the tests run as root; skipped otherwise), fills it, and runs the
command as a user would: one line, no traceback, and what the command half-wrote removed, never
anything earlier. The sweep command runs with ``cluster=slurm_local`` so that it takes the code
snapshot; ``sbatch`` is a stand-in on ``PATH`` that passes ``--test-only`` (the validation's
question) to the real one and refuses every real submission: nothing reaches Slurm's queue
whatever the code under test does. Reaching that refusal means every writing step before it passed.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpokit.run_folder import claim as folder

REPO = Path(__file__).resolve().parents[2]
REFUSAL = "test stand-in refuses every submission"


@pytest.fixture
def full_fs(tmp_path):
    """A 8 MB tmpfs at ``tmp_path/fs``, unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8M,nr_inodes=4000", "tmpfs", str(mount)])
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, leave: int = 0) -> Path:
    """Fill ``mount``'s file system, then free about ``leave`` bytes; returns the filler file."""
    filler = mount / "filler"
    with open(filler, "ab", buffering=0) as f:  # unbuffered: close() has nothing left to flush
        try:
            while True:
                f.write(b"\0" * (1 << 16))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def fill_inodes(mount: Path) -> None:
    """Use up ``mount``'s inodes (space is left): creating a folder or file then fails with ENOSPC."""
    store = mount / "inodes"
    store.mkdir()
    i = 0
    try:
        while True:
            (store / str(i)).touch()
            i += 1
    except OSError as exc:
        assert exc.errno == errno.ENOSPC


@pytest.fixture
def sweep(tmp_path, base):
    """``sweep(logs_root, *extra) -> CompletedProcess``: the sweep command onto ``logs_root`` (one point,
    sweep_name=full, the bundled Slurm cluster), real submissions refused by the ``sbatch`` stand-in."""
    real = shutil.which("sbatch")
    if real is None:
        pytest.skip("no sbatch (the validation asks sbatch --test-only)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "sbatch"
    stand_in.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do [ "$a" = "--test-only" ] && exec {real} "$@"; done\n'
        f'echo "sbatch: error: {REFUSAL}" >&2\nexit 1\n'
    )
    stand_in.chmod(0o755)
    args = [a for a in base if not a.startswith(("logs_root=", "sweep_name="))]
    args += ["sweep_name=full", "cluster=slurm_local", "cluster.cpus_per_task=1", "cluster.mem_gb=1"]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GRPOKIT_VALIDATE_IN_PROCESS": "1"}

    def run(logs_root: Path, *extra: str) -> subprocess.CompletedProcess:
        command = [sys.executable, str(REPO / "launch" / "sweep.py"), *args, f"logs_root={logs_root}", *extra]
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)

    return run


def the_line(done: subprocess.CompletedProcess) -> str:
    """The command's one stderr line (Hydra's log lines aside); fails on a traceback."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [x for x in done.stderr.splitlines() if x.strip() and "[HYDRA]" not in x]
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_sweep_onto_a_full_logs_root_says_one_line_and_the_same_command_works_once_space_is_freed(full_fs, sweep):
    logs = full_fs / "logs"
    filler = fill(full_fs, leave=100 * 1024)  # the sweep folder's first files fit, the code snapshot does not
    done = sweep(logs)
    assert done.returncode == 2
    line = the_line(done)
    assert line.startswith(f"disk full writing the code snapshot (code/) into {logs / 'full'} (about ")
    assert "MB needed" in line and "sweep_name=full is free to use again" in line
    assert f"Free at least {line.split('Free at least ')[1].split(' under')[0]} under {logs}" in line
    # nothing left: no sweep folder, no code.partial, and no Hydra record (the kit's sweeper writes none)
    assert sorted(p.name for p in logs.iterdir()) == [], "no sweep folder, no code.partial left"

    filler.unlink()
    again = sweep(logs)  # the same command: the name is free, every write passes, Slurm is reached
    assert "already exists" not in again.stderr
    assert REFUSAL in again.stderr and "Traceback" not in again.stderr, again.stderr[-3000:]


LEAVE_FOR_CLAIM = 8 * 1024


def test_a_full_disk_at_the_point_folders_or_manifest_removes_the_new_sweep_folder(full_fs, sweep):
    logs = full_fs / "logs"
    fill(full_fs, leave=LEAVE_FOR_CLAIM)  # the sweep folder's claim fits; the point folder's files do not
    done = sweep(logs, "use_live_code=true")  # no snapshot: the point folders are the first big write
    assert done.returncode == 2
    line = the_line(done)
    assert line.startswith("disk full writing ") and "nothing was submitted" in line, line
    assert "the point folders" in line or "manifest.json" in line, line
    assert not (logs / "full").exists()


def test_a_sweep_taking_over_a_dry_runs_folder_on_a_full_disk_leaves_the_dry_run_as_it_was(full_fs, sweep):
    logs = full_fs / "logs"
    assert sweep(logs, "dry_run=true").returncode == 0
    before = {p.name: p.read_bytes() for p in (logs / "full").iterdir()}
    assert set(before) == {"dry_run.md", "manifest.json"}
    fill(full_fs, leave=100 * 1024)
    done = sweep(logs)
    assert done.returncode == 2
    line = the_line(done)
    assert "the code snapshot" in line and f"what this command wrote into {logs / 'full'} removed" in line
    assert {p.name: p.read_bytes() for p in (logs / "full").iterdir()} == before
    assert folder.folder_state(logs / "full") == "free"


def test_a_sweep_whose_folder_cannot_be_created_says_one_line(full_fs, sweep):
    logs = full_fs / "logs"
    (logs / ".hydra").mkdir(parents=True)
    (logs / ".hydra" / "multirun.yaml").write_text("")  # Hydra rewrites it: no new inode needed
    fill_inodes(full_fs)
    done = sweep(logs)
    assert done.returncode == 2
    line = the_line(done)
    assert line.startswith(f"disk full writing the sweep folder and its submissions.jsonl into {logs} "), line
    assert "nothing was left behind" in line
    assert not (logs / "full").exists()


def test_resubmit_on_a_full_disk_says_one_line_and_leaves_the_sweep_as_it_was(full_fs, local_sweep, capsys):
    from grpokit.cli import resubmit as cli

    root = full_fs / "logs" / "local"
    local_sweep(root)
    submissions = (root / "submissions.jsonl").read_bytes()
    manifest = (root / "manifest.json").read_bytes()
    fill(full_fs)
    assert cli.main([str(root)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: disk full writing resubmit.json of 1 point(s) into {root} ")
    assert "nothing was resubmitted" in err and "run the same command again" in err
    assert (root / "submissions.jsonl").read_bytes() == submissions
    assert (root / "manifest.json").read_bytes() == manifest
    assert not list(root.glob("*/resubmit.json"))


def test_report_on_a_full_disk_says_one_line(full_fs, local_sweep):
    root = full_fs / "logs" / "local"
    local_sweep(root)
    fill(full_fs)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, str(REPO / "launch" / "report.py"), str(root), "--no-slurm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: disk full writing the report into {root / 'report'} ")


def test_a_submission_line_that_does_not_fit_leaves_no_half_line(full_fs):
    with folder.claim(full_fs, "s", generated=False, resume=False) as c:
        c.record("new", ["000"], [None])
        size = (full_fs / "s" / "submissions.jsonl").stat().st_size
        fill(full_fs)
        with pytest.raises(OSError) as exc:
            c.record("new", ["x" * 10_000], [None])  # more than the page the file already has
        assert exc.value.errno == errno.ENOSPC
    assert (full_fs / "s" / "submissions.jsonl").stat().st_size == size

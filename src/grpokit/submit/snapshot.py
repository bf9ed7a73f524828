"""Frozen code per sweep: the kit's code every attempt of every point runs (issue 16.2).

A Slurm job of a sweep imports ``grpokit`` when it starts, which may be long after the sweep was
submitted (queued, requeued after a time-out or a preemption, resubmitted). Editing the checkout in
between would change what the points run. So at its first submission the sweep copies the code into
``<sweep>/code/`` and every job of the sweep runs from that copy:

- ``code/src/``: in a git checkout, every file ``git ls-files --cached --others --exclude-standard``
  lists under ``src/`` (tracked files and new ones not yet added, as they are in the working tree:
  what the live code would run now); outside a checkout (an installed wheel), the installed
  ``grpokit`` and ``hydra_plugins/grpokit_launcher`` packages;
- ``code/commit.txt``: ``git rev-parse HEAD`` (or ``not a git checkout: grpokit <version>``);
- ``code/dirty.diff``: ``git diff HEAD -- src`` (empty when clean); ``code/untracked.txt``: the new
  files copied that git does not track yet.

The batch script of every array the sweep submits (:func:`use`, called for each submission into
the sweep folder: the first, ``resume=true``, ``resubmit.py``, successive halving's rungs) exports
``PYTHONPATH=<sweep>/code/src:$PYTHONPATH`` before submitit's Python starts; the driver's children
(Ray's head and workers, verl's trainer and its Ray workers, the sidecars) inherit the environment,
so they import the same copy. The copy is made once and never changed: later submissions into the
folder run it too. ``use_live_code=true`` at the sweep's first submission makes no copy (the jobs then
import the installed package, the live checkout for an editable install).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import grpokit
from grpokit.run_folder.manifest import read_manifest

#: The snapshot's folder in a sweep folder, and the import root inside it.
CODE, SRC = "code", "src"


def code_dir(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / CODE


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=120)


def _checkout_of(src: Path) -> Path | None:
    """The git checkout whose ``src/`` is ``src`` (None when it is not one, or git is missing)."""
    try:
        out = _git(src, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    root = Path(out.stdout.strip())
    return root if (root / SRC).resolve() == src.resolve() else None


def take(sweep_dir: Path, package_src: Path | None = None) -> dict[str, Any]:
    """Copy the code into ``<sweep>/code/`` (once; an existing snapshot is kept as it is).

    Args:
        sweep_dir: the sweep folder (claimed by this command).
        package_src: the folder that holds the imported ``grpokit`` (default: this one's parent).

    Returns:
        :func:`info` of the snapshot.

    Raises:
        OSError: the copy could not be written (the sweep folder's disk).
    """
    dest = code_dir(sweep_dir)
    if (dest / "commit.txt").exists():
        return info(sweep_dir)
    src = Path(package_src) if package_src else Path(grpokit.__file__).resolve().parent.parent
    tmp = dest.with_name(CODE + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / SRC).mkdir(parents=True)
    root = _checkout_of(src)
    if root is not None:
        listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", SRC)
        untracked = _git(root, "ls-files", "-z", "--others", "--exclude-standard", "--", SRC)
        new = set(untracked.stdout.split("\0")) - {""}
        for rel in sorted(set(listed.stdout.split("\0")) - {""}):
            path = root / rel
            if path.is_file() and "__pycache__" not in path.parts:  # a tracked file deleted: not copied
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        head = _git(root, "rev-parse", "HEAD").stdout.strip() or "no commit yet"
        (tmp / "commit.txt").write_text(head + "\n")
        (tmp / "dirty.diff").write_text(_git(root, "diff", "HEAD", "--", SRC).stdout)
        (tmp / "untracked.txt").write_text("".join(f"{n}\n" for n in sorted(new)))
    else:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(src / "grpokit", tmp / SRC / "grpokit", ignore=ignore)
        plugin = src / "hydra_plugins" / "grpokit_launcher"
        if plugin.is_dir():
            shutil.copytree(plugin, tmp / SRC / "hydra_plugins" / "grpokit_launcher", ignore=ignore)
        version = getattr(grpokit, "__version__", None) or _installed_version()
        (tmp / "commit.txt").write_text(f"not a git checkout: grpokit {version} from {src}\n")
    tmp.rename(dest)  # whole or not at all: a job never sees a half-copied snapshot
    return info(sweep_dir)


def estimate(package_src: Path | None = None) -> int:
    """About the bytes :func:`take` writes: the files under the package's ``src`` folder (a block
    each at least; ``__pycache__`` left out), for the line a full disk leaves."""
    from grpokit.submit.no_space import tree_size

    return tree_size(Path(package_src) if package_src else Path(grpokit.__file__).resolve().parent.parent)


def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("grpokit")
    except metadata.PackageNotFoundError:
        return "unknown"


def info(sweep_dir: Path) -> dict[str, Any] | None:
    """``{"path", "commit", "dirty"}`` of the sweep's snapshot (None without one); ``dirty``: the
    copy differs from the commit (a non-empty ``dirty.diff`` or new files)."""
    dest = code_dir(sweep_dir)
    if not (dest / "commit.txt").exists():
        return None
    diff, new = dest / "dirty.diff", dest / "untracked.txt"
    dirty = (diff.exists() and diff.stat().st_size > 0) or (new.exists() and new.stat().st_size > 0)
    return {"path": str(dest / SRC), "commit": (dest / "commit.txt").read_text().strip(), "dirty": dirty}


def setup_lines(sweep_dir: Path) -> list[str]:
    """Batch-script lines that put the sweep's snapshot first on ``PYTHONPATH`` (none without one)."""
    snap = info(sweep_dir)
    if snap is None:
        return []
    path = shlex.quote(snap["path"])
    return [
        f"# grpokit: the sweep's frozen code (grpokit.submit.snapshot): {snap['commit']}",
        f'export PYTHONPATH={path}"${{PYTHONPATH:+:$PYTHONPATH}}"',
    ]


def use(executor, sweep_dir: Path) -> None:
    """Make a ``submitit.SlurmExecutor`` of this sweep run the snapshot (:func:`setup_lines` after
    its own ``setup`` lines); nothing without a snapshot."""
    lines = setup_lines(sweep_dir)
    if lines:
        executor.update_parameters(setup=[*(executor.parameters.get("setup") or []), *lines])


def record(sweep_dir: Path) -> None:
    """Add the snapshot's :func:`info` to ``manifest.json`` as ``"code"`` (``null``: live code)."""
    manifest = read_manifest(sweep_dir)
    manifest.code, manifest.code_recorded = info(sweep_dir), True
    manifest.write(sweep_dir)

"""The kit as a user installs it: the wheel in a fresh virtual environment, run from a folder outside the checkout.

Issue 14.4: nothing may assume an editable checkout. The wheel is built from this checkout and
installed into a new venv with ``--no-deps``; its dependencies (verl, Hydra, torch, ...) come from
the checkout's venv through a ``.pth`` line, which puts that folder on ``sys.path`` without running
the ``.pth`` files inside it, so the checkout's editable ``grpokit`` stays invisible (asserted). This
is the one setting a user would not make: it saves downloading verl's stack again (no network here).
From a new project folder the user's commands run as the README gives them: ``grpokit prepare-data``,
``grpokit make-tiny-model``, then a two-point ``grpokit sweep -m ... dry_run=true`` whose points
validate against verl's schema and whose launcher (``hydra/launcher=grpokit``) comes from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("GRPOKIT_SHARED", REPO.parent / "shared"))


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the grpokit wheel (dependencies visible from the checkout's venv)."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("GRPOKIT_HOME", "PYTHONPATH", "VIRTUAL_ENV")}
    # Built from a copy of what the wheel is made of: setuptools builds in the source tree (build/,
    # *.egg-info), which must not land in the checkout others work in.
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # --no-build-isolation: setuptools from this venv (no index to fetch a build environment from)
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), str(source)],
        tmp,
        env,
    )
    (wheel,) = tmp.glob("grpokit-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env)
    site = Path(
        subprocess.check_output(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    # The dependencies this interpreter sees (its site-packages and any a .pth of it adds), as plain
    # path lines: a .pth path is not scanned for .pth files, so the checkout's editable grpokit stays out.
    deps = [sysconfig.get_paths()["purelib"], *(p for p in sys.path if p.endswith("site-packages"))]
    (site / "zz_checkout_deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        tmp,
        env,
    )
    return venv


def test_wheel_runs_a_dry_run_sweep_from_a_folder_outside_the_checkout(wheel_venv: Path, tmp_path: Path):
    project = tmp_path / "project"  # the user's project folder: data/, models/, logs/ land here
    project.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GRPOKIT_HOME", "PYTHONPATH", "VIRTUAL_ENV", "GRPOKIT_TINY_MODEL")
    }
    env["PATH"] = f"{wheel_venv / 'bin'}{os.pathsep}{env['PATH']}"
    py = str(wheel_venv / "bin" / "python")

    where = _run(
        [
            py,
            "-c",
            "import grpokit, hydra_plugins.grpokit_launcher.grpokit_launcher as l, "
            "hydra_plugins.grpokit_launcher.grpokit_sweeper as s, grpokit.paths as p; "
            "print(grpokit.__file__, l.__file__, s.__file__, p.CONFIG_DIR, p.project_dir())",
        ],
        project,
        env,
    ).stdout.split()
    for path in where[:4]:
        assert Path(path).is_relative_to(wheel_venv), f"{path} is not the wheel's copy (the checkout leaked in)"
    assert (Path(where[3]) / "config.yaml").is_file(), "the configs are not package data of the wheel"
    assert Path(where[4]) == project.resolve()  # the project folder is the working folder, not the checkout

    grpokit = str(wheel_venv / "bin" / "grpokit")
    _run(
        [grpokit, "prepare-data", "gsm8k", "--source", str(SHARED / "data" / "gsm8k"), "--out", "data/gsm8k"],
        project,
        env,
    )
    _run([grpokit, "make-tiny-model", "--out", "models/tiny"], project, env)
    out = _run(
        [
            grpokit,
            "sweep",
            "-m",
            "cluster=slurm_local",
            "model=tiny",
            "runtime.needs_gpu=false",
            "sweep_name=wheel",
            "dry_run=true",
            "verl.data.train_batch_size=8,16",
        ],
        project,
        env,
    )
    text = out.stdout + out.stderr
    assert "dry run: 2 point(s) validated, nothing submitted" in text, text[-3000:]
    dry_run = (project / "logs" / "wheel" / "dry_run.md").read_text()
    assert "000_train_batch_size-8" in dry_run and "001_train_batch_size-16" in dry_run
    # the points read the project's own data and model, resolved at submission
    assert str(project.resolve() / "data" / "gsm8k" / "train.parquet") in dry_run
    assert str(project.resolve() / "models" / "tiny") in dry_run
    assert str(REPO) not in dry_run, "a path of the checkout in a point of the installed kit"

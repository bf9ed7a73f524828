"""The sweep's frozen code (grpokit.submit.snapshot): what is copied, recorded, and put on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess

from grpokit.config.schema import ClusterConf
from grpokit.submit import snapshot


def git(root, *args):
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


def checkout(tmp_path):
    root = tmp_path / "repo"
    pkg = root / "src" / "grpokit"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("A = 1\n")
    (pkg / "gone.py").write_text("")
    (root / "README.md").write_text("not code\n")
    (root / ".gitignore").write_text("*.log\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "c")
    return root


def test_a_checkout_is_copied_as_it_is_now_with_its_commit_and_diff(tmp_path):
    root = checkout(tmp_path)
    pkg = root / "src" / "grpokit"
    (pkg / "a.py").write_text("A = 2\n")  # edited, not committed
    (pkg / "new.py").write_text("N = 1\n")  # not added yet: the live code imports it
    (pkg / "gone.py").unlink()  # deleted: not copied
    (pkg / "x.log").write_text("ignored\n")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    info = snapshot.take(sweep, package_src=root / "src")
    code = sweep / "code"
    assert info == {"path": str(code / "src"), "commit": git(root, "rev-parse", "HEAD").strip(), "dirty": True}
    files = sorted(str(p.relative_to(code / "src")) for p in (code / "src").rglob("*") if p.is_file())
    assert files == ["grpokit/__init__.py", "grpokit/a.py", "grpokit/new.py"]
    assert (code / "src" / "grpokit" / "a.py").read_text() == "A = 2\n"
    assert "+A = 2" in (code / "dirty.diff").read_text()
    assert (code / "untracked.txt").read_text() == "src/grpokit/new.py\n"

    (pkg / "a.py").write_text("A = 3\n")
    assert snapshot.take(sweep, package_src=root / "src") == info, "a snapshot is taken once"
    assert (code / "src" / "grpokit" / "a.py").read_text() == "A = 2\n"


def test_an_installed_package_is_copied_when_there_is_no_checkout(tmp_path):
    site = tmp_path / "site"
    (site / "grpokit" / "__pycache__").mkdir(parents=True)
    (site / "grpokit" / "__init__.py").write_text("")
    (site / "grpokit" / "__pycache__" / "x.pyc").write_text("")
    (site / "hydra_plugins" / "grpokit_launcher").mkdir(parents=True)
    (site / "hydra_plugins" / "grpokit_launcher" / "p.py").write_text("")
    info = snapshot.take(tmp_path / "sweep", package_src=site)
    src = tmp_path / "sweep" / "code" / "src"
    assert (src / "grpokit" / "__init__.py").exists() and not (src / "grpokit" / "__pycache__").exists()
    assert (src / "hydra_plugins" / "grpokit_launcher" / "p.py").exists()
    assert info["commit"].startswith("not a git checkout: grpokit ") and info["dirty"] is False


def test_the_batch_script_puts_the_snapshot_first_on_pythonpath(tmp_path):
    import submitit

    sweep = tmp_path / "sweep"
    executor = submitit.SlurmExecutor(folder=str(tmp_path / "submitit"))
    executor.update_parameters(setup=["echo first"])
    snapshot.use(executor, sweep)
    assert executor.parameters["setup"] == ["echo first"], "no snapshot (use_live_code): nothing added"
    snapshot.take(sweep, package_src=checkout(tmp_path) / "src")
    snapshot.use(executor, sweep)
    setup = executor.parameters["setup"]
    assert (
        setup[0] == "echo first" and setup[-1] == f'export PYTHONPATH={sweep}/code/src"${{PYTHONPATH:+:$PYTHONPATH}}"'
    )
    out = subprocess.run(
        ["bash", "-c", "\n".join([*setup, 'echo "$PYTHONPATH"'])],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": "/keep"},
    )
    assert out.stdout.splitlines()[-1] == f"{sweep}/code/src:/keep"


def test_the_halving_controller_runs_the_snapshot_too(tmp_path, monkeypatch):
    """The controller job (successive halving) ranks and resubmits: it runs the frozen code, as the points do."""
    import submitit

    from grpokit.submit import halving_controller as halving

    sweep = tmp_path / "sweep"
    snapshot.take(sweep, package_src=checkout(tmp_path) / "src")
    seen = {}

    def fake_submit(self, fn, *args):  # no sbatch here: the batch script's setup lines are what matter
        seen["setup"] = list(self.parameters.get("setup") or [])

        class Job:
            job_id = "1"

        return Job()

    monkeypatch.setattr(submitit.SlurmExecutor, "submit", fake_submit)
    halving.submit_controller(sweep, ClusterConf(partition="gpu", setup=["echo site"]), ["7"], 0)
    assert seen["setup"][0] == "echo site"
    assert seen["setup"][-1] == f'export PYTHONPATH={sweep}/code/src"${{PYTHONPATH:+:$PYTHONPATH}}"'

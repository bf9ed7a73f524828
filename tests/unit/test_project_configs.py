"""The project's own configs/ on Hydra's search path (grpokit.paths.config_dirs and the
GrpokitProjectConfigs search-path plugin): a researcher's cluster, hardware or experiment file lives
next to the packaged ones without editing the installed package; a new name adds an option, a
packaged name is overridden."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpokit.config.compose import compose_kit
from grpokit.paths import CONFIG_DIR, config_dirs, group_files
from grpokit.validate.group_choices import choices

MYSITE = """# @package cluster
# my site's urgent partition
defaults:
  - slurm
  - _self_
partition: urgent
mem_gb: 1
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (GRPOKIT_HOME) with a cluster file of its own and an override of a packaged
    hardware profile (the packaged one with one value changed)."""
    (tmp_path / "configs" / "cluster").mkdir(parents=True)
    (tmp_path / "configs" / "cluster" / "mysite.yaml").write_text(MYSITE)
    (tmp_path / "configs" / "hardware").mkdir()
    packaged = (CONFIG_DIR / "hardware" / "h200.yaml").read_text()
    (tmp_path / "configs" / "hardware" / "h200.yaml").write_text(
        packaged + "\nexperiment:\n  note_from_project: here\n"
    )
    monkeypatch.setenv("GRPOKIT_HOME", str(tmp_path))
    return tmp_path


def test_a_project_file_adds_an_option_and_overrides_a_packaged_one(project: Path):
    assert config_dirs() == [project / "configs", CONFIG_DIR]
    assert "mysite" in choices("cluster") and {"local", "slurm", "slurm_local"} <= set(choices("cluster"))
    assert group_files("hardware")["h200"] == project / "configs" / "hardware" / "h200.yaml"
    assert group_files("hardware")["consumer_24gb"] == CONFIG_DIR / "hardware" / "consumer_24gb.yaml"

    cfg = compose_kit(["cluster=mysite"])
    assert (cfg.cluster.kind, cfg.cluster.partition, cfg.cluster.mem_gb) == ("slurm", "urgent", 1)
    assert cfg.cluster.timeout_min == 720  # from the packaged slurm.yaml it extends
    assert compose_kit(["hardware=h200"]).experiment.note_from_project == "here"
    assert "note_from_project" not in compose_kit(["hardware=consumer_24gb"]).experiment


def test_without_a_project_configs_folder_only_the_package_is_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_HOME", str(tmp_path))
    assert config_dirs() == [CONFIG_DIR]
    assert choices("cluster") == ["local", "slurm", "slurm_local"]


def test_the_sweep_command_offers_and_uses_the_project_cluster(project: Path, kit, kit_overrides, tmp_path):
    """The sweep command (Hydra's main, not compose_kit) sees the project's file: a dry run with
    cluster=mysite writes its partition into the #SBATCH request; a mistyped name offers it."""
    out = kit.run(
        "sweep.py",
        ["-m", *kit_overrides, "cluster=mysite", "sweep_name=mine", "dry_run=true"],
        env={"GRPOKIT_HOME": str(project)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "#SBATCH --partition=urgent" in (tmp_path / "logs" / "mine" / "dry_run.md").read_text()
    bad = kit.run("sweep.py", ["-m", *kit_overrides, "cluster=mysit"], env={"GRPOKIT_HOME": str(project)})
    assert bad.returncode == 2 and "mysite" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr

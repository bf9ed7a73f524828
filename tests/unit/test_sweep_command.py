"""The sweep command's own truths: which keys take one value per command, and its exit status
after points run on this machine (``cluster=local``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from grpokit.run_folder import RunFolder, write_json_atomic
from grpokit.run_folder.claim import SweepFolderError
from grpokit.submit import stages


@pytest.mark.parametrize("key", ["use_live_code", "sweep_name", "resume", "dry_run", "wait", "logs_root"])
def test_a_command_key_cannot_be_swept(key):
    """One sweep command makes one sweep folder with one code snapshot: ``use_live_code=true,false``
    (or any folder setting with two values) is refused before anything is built or submitted."""
    overrides = [[f"{key}=a", "rollout.n=2"], [f"{key}=b", "rollout.n=2"]]
    with pytest.raises(SweepFolderError, match=rf"^{key} is swept, .*Give {key} one value"):
        stages.sweep_options(OmegaConf.create({}), overrides)


def _point(tmp_path, name: str, state: str | None):
    run = RunFolder(tmp_path / name)
    run.path.mkdir()
    if state:
        write_json_atomic(run.status, {"state": state, "attempts": []})
    # the two fields local_failures reads of a grpokit.config.point.PointSpec
    return SimpleNamespace(name=name, run_dir=str(run.path))


def test_a_point_that_failed_here_makes_the_command_exit_1_naming_it(tmp_path, capsys):
    specs = [
        _point(tmp_path, "000_ok", "completed"),
        _point(tmp_path, "001_nogpu", "skipped_no_gpu"),
        _point(tmp_path, "002_bad", "failed"),
    ]
    codes = [0, 0, 1]  # the drivers' exit statuses (grpokit.runtime.decisions.outcome.Exit)
    ran = list(zip(specs, codes, strict=True))  # (point, exit status): the local backend's run_pending
    assert stages.local_failures(ran) == ["002_bad (failed)"]
    with pytest.raises(SystemExit) as exc:
        stages._exit_if_failed_here(ran)
    assert exc.value.code == 1
    assert "1 point(s) run here did not succeed: 002_bad (failed)" in capsys.readouterr().err


def test_points_that_completed_or_were_skipped_here_leave_the_command_at_0(tmp_path):
    specs = [_point(tmp_path, "000_ok", "completed"), _point(tmp_path, "001_nogpu", "skipped_no_gpu")]
    stages._exit_if_failed_here(list(zip(specs, [0, 0], strict=True)))  # returns: no SystemExit


def test_hydra_learns_the_mode_without_composing_and_runs_the_same_multirun(tmp_path):
    """``mode_without_composing`` answers Hydra's ``get_mode`` with None without composing: the
    answer Hydra's own composition gives for the kit's config, which leaves ``hydra.mode`` unset."""
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from grpokit.cli.sweep import mode_without_composing
    from grpokit.config import store
    from grpokit.paths import CONFIG_DIR

    store.register()
    GlobalHydra.instance().clear()
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        hydra = GlobalHydra.instance().hydra
        overrides = ["verl.data.train_batch_size=8,16"]
        cfg = hydra.compose_config(  # what Hydra's get_mode composes, to read hydra.mode from it
            "config", overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False, validate_sweep_overrides=False
        )
        assert "verl" in cfg and cfg.hydra.mode is None
        assert hydra.get_mode(config_name="config", overrides=overrides) is None
        with mode_without_composing():
            assert hydra.get_mode(config_name="config", overrides=overrides) is None
        assert Hydra.get_mode is not None and hydra.get_mode.__func__ is Hydra.get_mode  # put back
    GlobalHydra.instance().clear()

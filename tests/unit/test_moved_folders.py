"""A sweep folder moved, or a point's run folder deleted, under the user's own hands (issue 36.5):
``status`` and ``resubmit`` name the moved or missing folder and what to do, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grpokit.cli import resubmit, status
from grpokit.submit import resubmit_points


def test_status_of_a_moved_sweep_folder_says_where_it_was_and_reads_the_points_where_they_are(
    tmp_path, local_sweep, capsys
):
    old = tmp_path / "logs" / "lr"
    local_sweep(old)
    new = tmp_path / "elsewhere" / "lr"
    new.parent.mkdir()
    shutil.move(old, new)
    assert status.main([str(new), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"warning: sweep folder {new} was moved here from {old}: ") and "Traceback" not in err
    assert f"Move it back (mv {new} {old}), then `grpokit resubmit {old}`" in err
    assert len(err.strip().splitlines()) == 1
    assert [(r["name"], r["state"]) for r in json.loads(out)] == [("000", "completed"), ("001", "failed")]


def test_resubmit_of_a_moved_sweep_folder_is_one_line_naming_both_places(tmp_path, local_sweep, capsys):
    old = tmp_path / "logs" / "lr"
    local_sweep(old)
    new = tmp_path / "lr_moved"
    shutil.move(old, new)
    submissions = (new / "submissions.jsonl").read_bytes()
    for dry in ([], ["--dry-run"]):
        assert resubmit.main([str(new), *dry]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"error: nothing was resubmitted: sweep folder {new} was moved here from {old}")
    assert (new / "submissions.jsonl").read_bytes() == submissions
    assert not list(new.glob("*/resubmit.json")) and not old.exists()


def test_a_deleted_run_folder_is_named_by_status_and_resubmit(tmp_path, local_sweep, capsys):
    root = tmp_path / "logs" / "lr"
    specs = local_sweep(root)
    shutil.rmtree(specs[1].run_dir)  # the failed point's folder, deleted by hand
    assert status.main([str(root), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    row = json.loads(out)[1]
    assert row["reason"].startswith(f"run folder {specs[1].run_dir} is missing (deleted or moved away")
    # without status.json and a Slurm job the point is not known to have failed: not taken, but named
    assert resubmit.main([str(root)]) == 0
    out = capsys.readouterr().out
    assert f"; the run folder of 001 ({specs[1].run_dir}) is missing (deleted or moved away)" in out
    # a point Slurm says failed (its driver stopped when the folder went) is refused, named
    with pytest.raises(resubmit_points.FoldersMissing, match=r"the run folder of 001 \(.*\) is missing"):
        resubmit_points.check_folders(root, [(1, "failed")])
    assert not Path(specs[1].run_dir).exists(), "nothing recreated"

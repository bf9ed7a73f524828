"""A sweep folder moved, or a point's run folder deleted, under the user's own hands (issue 36.5):
``status`` and ``resubmit`` name the moved or missing folder and what to do, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grpokit.cli import resubmit, status
from grpokit.run_folder import claim as folder
from grpokit.run_folder.manifest import write_manifest
from grpokit.submit import resubmit_points


def local_sweep(root: Path, bare_point) -> list:
    """A sweep as the sweep command leaves it (absolute run folders): 000 completed, 001 failed."""
    specs = [bare_point(root, i, {"kind": "local"}, root.name) for i in range(2)]
    with folder.claim(root.parent, root.name, generated=False, resume=False) as c:
        for s in specs:
            Path(s.run_dir).mkdir(parents=True)
            (Path(s.run_dir) / "point.json").write_text(s.to_json())
        write_manifest(root, specs, [None, None], experiment="e", cluster="local", swept_keys=[])
        c.record("new", [s.name for s in specs], [None, None])
    for s, state in zip(specs, ["completed", "failed"], strict=True):
        (Path(s.run_dir) / "status.json").write_text(
            json.dumps({"state": state, "reason": f"it {state}", "attempts": [{"attempt": 1, "start": "2026-01-01"}]})
        )
    return specs


def test_status_of_a_moved_sweep_folder_says_where_it_was_and_reads_the_points_where_they_are(
    tmp_path, bare_point, capsys
):
    old = tmp_path / "logs" / "lr"
    local_sweep(old, bare_point)
    new = tmp_path / "elsewhere" / "lr"
    new.parent.mkdir()
    shutil.move(old, new)
    assert status.main([str(new), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"warning: sweep folder {new} was moved here from {old}: ") and "Traceback" not in err
    assert f"Move it back (mv {new} {old}), then `grpokit resubmit {old}`" in err
    assert len(err.strip().splitlines()) == 1
    assert [(r["name"], r["state"]) for r in json.loads(out)] == [("000", "completed"), ("001", "failed")]


def test_resubmit_of_a_moved_sweep_folder_is_one_line_naming_both_places(tmp_path, bare_point, capsys):
    old = tmp_path / "logs" / "lr"
    local_sweep(old, bare_point)
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


def test_a_deleted_run_folder_is_named_by_status_and_resubmit(tmp_path, bare_point, capsys):
    root = tmp_path / "logs" / "lr"
    specs = local_sweep(root, bare_point)
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

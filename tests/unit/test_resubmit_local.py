"""``grpokit resubmit`` of a local sweep (``cluster=local``): its points run here, and a point that
fails again makes the command exit 1, naming the point, its state and the first line of its reason."""

from __future__ import annotations

import json
from pathlib import Path

from grpokit.cli import resubmit as cli
from grpokit.run_folder import claim as folder
from grpokit.run_folder.manifest import write_manifest
from grpokit.submit import resubmit

REASON = "trainer exited 3 at step 3\nTraceback (most recent call last):\n  ..."


def _status(run_dir: Path, state: str, reason: str) -> None:
    (run_dir / "status.json").write_text(json.dumps({"state": state, "reason": reason, "attempts": [{}]}))


def local_sweep(root: Path, bare_point) -> list:
    """A local sweep as the sweep command leaves it: point 000 completed, 001 failed."""
    specs = [bare_point(root, i, {"kind": "local"}, root.name) for i in range(2)]
    with folder.claim(root.parent, root.name, generated=False, resume=False) as c:
        for s in specs:
            Path(s.run_dir).mkdir(parents=True)
            (Path(s.run_dir) / "point.json").write_text(s.to_json())
        write_manifest(root, specs, [None, None], experiment="e", cluster="local", swept_keys=[])
        c.record("new", [s.name for s in specs], [None, None])
    _status(Path(specs[0].run_dir), "completed", "reached step 4")
    _status(Path(specs[1].run_dir), "failed", "trainer exited 3 at step 3")
    return specs


def test_a_local_point_that_fails_again_makes_resubmit_exit_1_naming_it_and_why(
    tmp_path, bare_point, monkeypatch, capsys
):
    specs = local_sweep(tmp_path / "local_sweep", bare_point)
    ran = []

    def run_local(todo):
        # stand-in for the drivers run here (Ray and a trainer on this machine): each point fails
        # again and its driver writes status.json, as grpokit.runtime.driver does, then exits 1
        for s in todo:
            ran.append(s.name)
            _status(Path(s.run_dir), "failed", REASON)
        return [1] * len(todo)

    monkeypatch.setattr(resubmit, "run_local", run_local)
    assert cli.main([str(Path(specs[0].run_dir).parent)]) == 1
    assert ran == ["001"], "only the failed point runs again"
    out, err = capsys.readouterr()
    assert "resubmitted 001 (failed, was never submitted) -> ran here" in out
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "001 (failed): trainer exited 3 at step 3" in line and "Traceback" not in err


def test_a_local_point_that_completes_leaves_resubmit_at_0(tmp_path, bare_point, monkeypatch, capsys):
    specs = local_sweep(tmp_path / "local_sweep", bare_point)

    def run_local(todo):  # stand-in for the driver, as above; this time the point completes
        for s in todo:
            _status(Path(s.run_dir), "completed", "reached step 4")
        return [0] * len(todo)

    monkeypatch.setattr(resubmit, "run_local", run_local)
    assert cli.main([str(Path(specs[0].run_dir).parent)]) == 0
    assert "error" not in capsys.readouterr().err

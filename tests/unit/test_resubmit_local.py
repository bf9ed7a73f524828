"""``grpokit resubmit`` of a local sweep (``cluster=local``): its points run here, and a point that
fails again makes the command exit 1, naming the point, its state and the first line of its reason."""

from __future__ import annotations

import json
from pathlib import Path

from grpokit.cli import resubmit as cli
from grpokit.run_folder import claim as folder
from grpokit.run_folder.manifest import write_manifest
from grpokit.run_folder.point_state import RESUBMITTABLE_STATES
from grpokit.submit import dispatch, resubmit_points, sweep_resume

REASON = "trainer exited 3 at step 3\nTraceback (most recent call last):\n  ..."


START = "2026-01-01T00:00:00+00:00"


def _status(run_dir: Path, state: str, reason: str) -> None:
    (run_dir / "status.json").write_text(
        json.dumps({"state": state, "reason": reason, "attempts": [{"attempt": 1, "start": START}]})
    )


def test_a_local_point_that_fails_again_makes_resubmit_exit_1_naming_it_and_why(
    tmp_path, local_sweep, monkeypatch, capsys
):
    specs = local_sweep(tmp_path / "local_sweep")
    ran = []

    def run_local(todo):
        # stand-in for the drivers run here (Ray and a trainer on this machine): each point fails
        # again and its driver writes status.json, as grpokit.runtime.driver does, then exits 1
        for s in todo:
            ran.append(s.name)
            _status(Path(s.run_dir), "failed", REASON)
        return [1] * len(todo)

    monkeypatch.setattr(dispatch, "run_local", run_local)  # the local backend runs points through it
    assert cli.main([str(Path(specs[0].run_dir).parent)]) == 1
    assert ran == ["001"], "only the failed point runs again"
    out, err = capsys.readouterr()
    assert "resubmitted 001 (failed, was never submitted) -> ran here" in out
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "001 (failed): trainer exited 3 at step 3" in line and "Traceback" not in err


def test_a_local_point_that_completes_leaves_resubmit_at_0(tmp_path, local_sweep, monkeypatch, capsys):
    specs = local_sweep(tmp_path / "local_sweep")

    def run_local(todo):  # stand-in for the driver, as above; this time the point completes
        for s in todo:
            _status(Path(s.run_dir), "completed", "reached step 4")
        return [0] * len(todo)

    monkeypatch.setattr(dispatch, "run_local", run_local)  # the local backend runs points through it
    assert cli.main([str(Path(specs[0].run_dir).parent)]) == 0
    assert "error" not in capsys.readouterr().err


def test_resume_and_resubmit_take_again_the_same_states(tmp_path, bare_point, capsys):
    # one folder, a point in each final state status.json can hold, and one never started
    root = tmp_path / "states"
    words = ["completed", "failed", "cancelled", "skipped_no_gpu", "pruned", None]
    specs = [bare_point(root, i, {"kind": "local"}, root.name) for i in range(len(words))]
    with folder.claim(root.parent, root.name, generated=False, resume=False) as c:
        for s in specs:
            Path(s.run_dir).mkdir(parents=True)
            (Path(s.run_dir) / "point.json").write_text(s.to_json())
        write_manifest(root, specs, [None] * len(specs), experiment="e", cluster="local", swept_keys=[])
        c.record("new", [s.name for s in specs], [None] * len(specs))
    for spec, word in zip(specs, words, strict=True):
        if word:
            _status(Path(spec.run_dir), word, "why")

    by_resubmit = dict(resubmit_points.select(root))
    by_resume = sweep_resume.to_resubmit(sweep_resume.point_states(root))
    assert by_resubmit == {1: "failed", 2: "cancelled", 3: "skipped_no_gpu"}
    # resume also submits the sweep's points that were never submitted; otherwise the same points
    assert by_resume == {**by_resubmit, 5: "not submitted"}
    assert resubmit_points.DEFAULT_STATES == RESUBMITTABLE_STATES
    # the command's refusal of a state it does not take says why, and its --help names skipped_no_gpu
    assert cli.states_problem(("skipped_no_gpu",)) is None
    assert "pruned point was stopped on purpose" in cli.states_problem(("pruned",))
    assert cli.states_problem(("completed",)).endswith(f"resubmit accepts {', '.join(RESUBMITTABLE_STATES)}")

"""grpokit.submit.repeats: an earlier sweep of the same experiment holding the same points is found
(from the manifests the kit itself writes); dry runs, other experiments and other values are not."""

from __future__ import annotations

from grpokit.run_folder.manifest import write_manifest
from grpokit.submit.repeats import earlier_sweeps

POINTS = [["model=tiny", f"verl.data.train_batch_size={b}", "sweep_name=x"] for b in (8, 16)]


def _sweep(logs, name, bare_point, overrides, experiment="gsm8k_grpo", dry_run=False):
    folder = logs / name
    specs = [bare_point(folder, i, sweep_name=name, kit_overrides=o) for i, o in enumerate(overrides)]
    write_manifest(
        folder, specs, [None] * len(specs), experiment=experiment, cluster="slurm", swept_keys=[], dry_run=dry_run
    )


def test_the_same_points_in_an_earlier_sweep_are_found_and_the_note_says_how_to_continue(tmp_path, bare_point):
    logs = tmp_path / "logs"
    _sweep(logs, "gsm8k_grpo_20261201-101010", bare_point, POINTS)
    _sweep(logs, "half", bare_point, [POINTS[0], ["model=tiny", "verl.data.train_batch_size=32"]])
    _sweep(logs, "dry", bare_point, POINTS, dry_run=True)
    _sweep(logs, "other_experiment", bare_point, POINTS, experiment="memalpha_grpo")
    _sweep(logs, "other_values", bare_point, [["model=tiny", "verl.data.train_batch_size=4"]])
    (logs / "not_a_sweep").mkdir()
    # the new command differs only in the sweep's name: the points are the same
    new = [[*p[:-1], "sweep_name=y"] for p in POINTS]
    found = {r.name: r.count for r in earlier_sweeps(logs, "gsm8k_grpo", new)}
    assert found == {"gsm8k_grpo_20261201-101010": 2, "half": 1}
    (full,) = [r for r in earlier_sweeps(logs, "gsm8k_grpo", new) if r.count == 2]
    assert full.note(2).startswith("all these 2 point(s) were submitted before, with the same overrides, as sweep")
    assert full.note(2).endswith("to continue those instead: sweep_name=gsm8k_grpo_20261201-101010 resume=true")
    assert earlier_sweeps(tmp_path / "nothing_here", "gsm8k_grpo", new) == []

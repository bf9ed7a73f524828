"""Sweep folders: claimed atomically, never re-used silently; resume compares settings; wait=true
waits for this submission only (grpokit.run_folder.claim and .manifest, grpokit.submit.sweep_resume and .wait)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from grpokit.config.point import PointSpec
from grpokit.problems import SweepValidationError
from grpokit.run_folder import claim as folder
from grpokit.run_folder.claim import SUBMISSIONS, SweepFolderError
from grpokit.run_folder.manifest import SweepManifest, read_manifest, replace_job_ids, write_manifest
from grpokit.submit import sweep_resume, wait

LR = "actor_rollout_ref.actor.optim.lr"


@pytest.fixture
def spec(bare_point):
    """``spec(root, index, *, lr, n, cluster)``: a point of sweep ``root`` with ``rollout.n`` swept."""

    def make(root: Path, index: int, *, lr: str | None = "2e-06", n: int = 2, cluster: dict | None = None) -> PointSpec:
        verl = [f"actor_rollout_ref.rollout.n={n}", "data.train_batch_size=8"] + ([f"{LR}={lr}"] if lr else [])
        return bare_point(
            root,
            index,
            cluster or {"kind": "slurm", "timeout_min": 15},
            root.name,
            name=f"{index:03d}_n-{n}",
            kit_overrides=[f"verl.actor_rollout_ref.rollout.n={n}"],
            swept={"verl.actor_rollout_ref.rollout.n": str(n)},
            verl_overrides=verl,
            experiment={"name": "gsm8k_grpo", "data_dir": "/data/gsm8k"},
            model={"name": "tiny", "path": "/models/tiny"},
            runtime={"max_timeout_requeues": 3},
        )

    return make


def submitted_sweep(root: Path, specs: list[PointSpec]) -> SweepManifest:
    """A sweep folder as a submission leaves it: claim, point.json files, manifest with ids."""
    with folder.claim(root.parent, root.name, generated=False, resume=False) as c:
        for s in specs:
            Path(s.run_dir).mkdir(parents=True)
            (Path(s.run_dir) / "point.json").write_text(s.to_json())
        write_manifest(root, specs, [f"7_{s.index}" for s in specs], experiment="e", cluster="slurm", swept_keys=[])
        c.record("new", [s.name for s in specs], [f"7_{s.index}" for s in specs])
    return read_manifest(root)


# --- folder states and the claim -------------------------------------------------------------


def test_folder_states(tmp_path):
    assert folder.folder_state(tmp_path / "x") == "absent"
    (tmp_path / "empty").mkdir()
    assert folder.folder_state(tmp_path / "empty") == "free"
    dry = tmp_path / "dry"
    dry.mkdir()
    (dry / "dry_run.md").write_text("# Dry run")
    (dry / "manifest.json").write_text("{}")
    assert folder.folder_state(dry) == "free", "a dry run's folder does not block the real run"
    claimed = tmp_path / "claimed"
    claimed.mkdir()
    (claimed / SUBMISSIONS).touch()
    assert folder.folder_state(claimed) == "sweep"
    legacy = tmp_path / "legacy"  # written before submissions.jsonl existed: run folders, a manifest
    (legacy / "000").mkdir(parents=True)
    (legacy / "manifest.json").write_text("{}")
    assert folder.folder_state(legacy) == "sweep"
    crashed = tmp_path / "crashed"  # a manifest without a dry run: a submission, not a preview
    crashed.mkdir()
    (crashed / "manifest.json").write_text("{}")
    assert folder.folder_state(crashed) == "sweep"


_CLAIM = """
import os, sys, time
from pathlib import Path
from grpokit.run_folder import claim as folder
from grpokit.run_folder.claim import SweepFolderError
start, logs_root, name, generated = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
time.sleep(max(0.0, start - time.time()))  # every process claims at the same moment
try:
    c = folder.claim(Path(logs_root), name, generated=generated, resume=False)
except SweepFolderError as exc:
    print(f"refused: {exc}")
    sys.exit(0)
c.record("new", [f"pid{os.getpid()}"], [None])
c.release()
print(c.name)
"""


def _race(run_together, tmp_path: Path, name: str, generated: bool, n: int = 6) -> list[str]:
    """``n`` separate Python processes (as ``n`` sweep commands typed at once) claim ``name`` at one moment."""
    return run_together(_CLAIM, n, str(tmp_path), name, "1" if generated else "0")


def test_generated_names_claimed_at_the_same_moment_get_one_folder_each(tmp_path, run_together):
    base = "gsm8k_grpo_20260101-120000"
    names = _race(run_together, tmp_path, base, generated=True)
    assert sorted(names) == sorted([base] + [f"{base}-{k}" for k in range(2, 7)])
    for name in names:  # each folder's claim holds exactly its own owner's submission
        lines = (tmp_path / name / SUBMISSIONS).read_text().splitlines()
        assert len(lines) == 1


def test_an_explicit_name_claimed_at_the_same_moment_has_exactly_one_owner(tmp_path, run_together):
    results = _race(run_together, tmp_path, "lr_sweep", generated=False)
    assert results.count("lr_sweep") == 1
    refused = [r for r in results if r.startswith("refused")]
    assert len(refused) == 5
    assert all("already exists" in r and "resume=true" in r and "\n" not in r for r in refused)
    assert len((tmp_path / "lr_sweep" / SUBMISSIONS).read_text().splitlines()) == 1


def test_a_real_sweep_takes_over_a_dry_run_folder_and_a_dry_run_never_takes_a_sweep(tmp_path, spec):
    dry = folder.dry_run_folder(tmp_path, "s", generated=False)
    (dry / "dry_run.md").write_text("# Dry run")
    write_manifest(dry, [spec(dry, 0)], [None], experiment="e", cluster="slurm", swept_keys=[], dry_run=True)
    with folder.claim(tmp_path, "s", generated=False, resume=False) as c:
        assert c.path == dry and not c.resumed
    assert folder.folder_state(dry) == "sweep"
    with pytest.raises(SweepFolderError, match="already exists"):
        folder.dry_run_folder(tmp_path, "s", generated=False)
    assert folder.dry_run_folder(tmp_path, "s", generated=True) == tmp_path / "s-2"


def test_check_before_validation_refuses_a_taken_name_and_a_resume_of_nothing(tmp_path, spec):
    with pytest.raises(SweepFolderError, match="no sweep folder .* to resume"):
        folder.check_before_validation(tmp_path / "typo", resume=True, generated=False)
    submitted_sweep(tmp_path / "s", [spec(tmp_path / "s", 0)])
    with pytest.raises(SweepFolderError, match="already exists.*resume=true"):
        folder.check_before_validation(tmp_path / "s", resume=False, generated=False)
    folder.check_before_validation(tmp_path / "s", resume=True, generated=False)
    folder.check_before_validation(tmp_path / "s", resume=False, generated=True)  # takes s-2 later


@pytest.mark.parametrize("name", ["a/b", "", ".hidden", "../up"])
def test_a_sweep_name_is_one_folder_name(tmp_path, name):
    with pytest.raises(SweepFolderError, match="not a folder name"):
        folder.claim(tmp_path, name, generated=False, resume=False)


def test_a_resume_locks_the_folder_and_appends_to_its_submissions(tmp_path, spec):
    root = tmp_path / "s"
    submitted_sweep(root, [spec(root, 0)])
    with folder.claim(tmp_path, "s", generated=False, resume=True) as c:
        assert c.resumed
        other = os.open(root / SUBMISSIONS, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):  # a second resume (or resubmit.py) waits here
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
        c.record("resume", ["000_n-2"], ["9_0"])
    lines = [json.loads(line) for line in (root / SUBMISSIONS).read_text().splitlines()]
    assert [(x["kind"], x["job_ids"]) for x in lines] == [("new", ["7_0"]), ("resume", ["9_0"])]


# --- resume: the settings must be the recorded ones ---------------------------------------------


def test_identical_settings_resume_and_cluster_or_runtime_changes_are_allowed(tmp_path, spec):
    root = tmp_path / "s"
    manifest = submitted_sweep(root, [spec(root, i, n=n) for i, n in enumerate((2, 4, 8))])
    again = [spec(root, i, n=n, cluster={"kind": "slurm", "timeout_min": 60}) for i, n in enumerate((2, 4, 8))]
    assert sweep_resume.check_same_settings(manifest, again) == []


def test_a_changed_lr_is_refused_naming_every_point_the_key_and_both_values(tmp_path, spec):
    root = tmp_path / "s"
    manifest = submitted_sweep(root, [spec(root, i, n=n) for i, n in enumerate((2, 4, 8))])
    problems = sweep_resume.check_same_settings(
        manifest, [spec(root, i, n=n, lr="5e-06") for i, n in enumerate((2, 4, 8))]
    )
    assert [(p.point, p.key) for p in problems] == [(f"{i:03d}_n-{n}", f"verl.{LR}") for i, n in enumerate((2, 4, 8))]
    assert all("2e-06 -> 5e-06" in p.message for p in problems)


def test_a_key_left_at_verls_default_is_shown_with_verls_value(tmp_path, spec):
    root = tmp_path / "s"
    manifest = submitted_sweep(root, [spec(root, 0, lr=None)])
    (p,) = sweep_resume.check_same_settings(manifest, [spec(root, 0, lr="5e-06")])
    assert p.key == f"verl.{LR}" and p.message.startswith("1e-06 (verl's default) -> 5e-06")


def test_a_changed_point_set_is_refused_naming_the_points(tmp_path, spec):
    root = tmp_path / "s"
    manifest = submitted_sweep(root, [spec(root, i, n=n) for i, n in enumerate((2, 4, 8))])
    more = sweep_resume.check_same_settings(manifest, [spec(root, i, n=n) for i, n in enumerate((2, 4, 8, 16))])
    assert [(p.point, p.key) for p in more] == [("003_n-16", "point")]
    fewer = sweep_resume.check_same_settings(manifest, [spec(root, i, n=n) for i, n in enumerate((2, 4))])
    assert [(p.point, p.key) for p in fewer] == [("002_n-8", "point")]
    assert "not made by this command" in fewer[0].message


def test_a_point_that_never_started_is_compared_by_its_recorded_overrides(tmp_path, spec):
    root = tmp_path / "s"
    manifest = submitted_sweep(root, [spec(root, 0)])
    (root / "000_n-2" / "point.json").unlink()
    manifest.points[0].overrides = [
        "verl.actor_rollout_ref.rollout.n=2",
        "sweep_name=s",
        "cluster.timeout_min=15",
    ]
    new = spec(root, 0)
    new.kit_overrides = ["verl.actor_rollout_ref.rollout.n=2", "sweep_name=s", "resume=true", "cluster.timeout_min=60"]
    assert sweep_resume.check_same_settings(manifest, [new]) == []
    new.kit_overrides.append(f"verl.{LR}=5e-06")
    (p,) = sweep_resume.check_same_settings(manifest, [new])
    assert p.key == f"verl.{LR}" and "(not on the command line) -> 5e-06" in p.message


def _named(point: PointSpec) -> PointSpec:
    """The verl keys the kit derives from the point's and the sweep's names, as grpokit.config.point sets them."""
    point.verl_overrides += [
        f"trainer.default_local_dir={point.checkpoint_dir}",
        f"trainer.project_name={point.sweep_name}",
        f"trainer.experiment_name={point.name}",
    ]
    return point


def test_a_resume_refusal_names_only_what_the_user_changed_and_counts_the_lines_it_prints(tmp_path, spec):
    root = tmp_path / "s"
    manifest = submitted_sweep(root, [_named(spec(root, i, n=n)) for i, n in enumerate((2, 4))])
    # rollout.n=2,8 instead of 2,4 renames point 001 (its folder, experiment_name): the change is n only
    again = [_named(spec(root, i, n=n, lr="5e-06")) for i, n in enumerate((2, 8))]
    problems = sweep_resume.check_same_settings(manifest, again)
    assert sorted((p.point, p.key) for p in problems) == [
        ("000_n-2", f"verl.{LR}"),
        ("001_n-4", f"verl.{LR}"),
        ("001_n-4", "verl.actor_rollout_ref.rollout.n"),
    ]
    lines = str(SweepValidationError(problems)).splitlines()
    # the lr change is one line naming both points: 2 lines printed, 2 counted
    assert lines[0].startswith("2 problem(s) in 2 point(s); nothing was submitted") and len(lines) == 3
    assert lines[1].startswith(f"[000_n-2, 001_n-4] verl.{LR}: 2e-06 -> 5e-06 (recorded in its point.json")


def test_a_typed_value_equal_to_verls_default_is_not_labelled_verls_default(tmp_path, spec):
    root = tmp_path / "s"
    old = spec(root, 0)
    old.kit_overrides.append("verl.data.max_prompt_length=1024")
    old.verl_overrides.append("data.max_prompt_length=1024")
    manifest = submitted_sweep(root, [old])
    new = spec(root, 0)
    new.kit_overrides.append("verl.data.max_prompt_length=512")  # verl's default: not in verl_overrides
    (p,) = sweep_resume.check_same_settings(manifest, [new])
    assert p.key == "verl.data.max_prompt_length" and p.message.startswith("1024 -> 512 (recorded in its point.json")
    # verl's default typed on one side and left out on the other is no change
    root = tmp_path / "default"
    manifest = submitted_sweep(root, [spec(root, 0)])
    typed_default = spec(root, 0)
    typed_default.kit_overrides.append("verl.data.max_prompt_length=512")
    assert sweep_resume.check_same_settings(manifest, [typed_default]) == []
    # typed names the kit would derive are compared: the user chose them
    root = tmp_path / "named"
    manifest = submitted_sweep(root, [_named(spec(root, 0))])
    new = _named(spec(root, 0))
    new.kit_overrides.append("verl.trainer.experiment_name=mine")
    new.verl_overrides[-1] = "trainer.experiment_name=mine"
    (p,) = sweep_resume.check_same_settings(manifest, [new])
    assert p.key == "verl.trainer.experiment_name" and p.message.startswith("000_n-2 -> mine")


def test_a_resume_resubmits_the_resubmittable_states_and_the_points_never_submitted():
    states = {0: "completed", 1: "failed", 2: "running", 3: "queued", 4: "timeout", 5: "not submitted", 6: "cancelled"}
    states |= {7: "preempted", 8: "skipped_no_gpu", 9: "pruned", 10: "unknown"}
    assert sweep_resume.to_resubmit(states) == {
        1: "failed",
        4: "timeout",
        5: "not submitted",
        6: "cancelled",
        7: "preempted",
        8: "skipped_no_gpu",
    }


def test_replaced_job_ids_are_kept_in_the_points_history(tmp_path, spec):
    root = tmp_path / "s"
    manifest = submitted_sweep(root, [spec(root, i) for i in range(3)])
    changed = replace_job_ids(manifest, {1: ("9_0", "failed")})
    assert [e.index for e in changed] == [1]
    p = manifest.points
    assert (p[0].job_id, p[1].job_id, p[2].job_id) == ("7_0", "9_0", "7_2")
    assert p[1].array_job_id == "9" and p[1].array_task_id == 0
    assert [(h.job_id, h.state) for h in p[1].history] == [("7_1", "failed")]
    manifest.write(root)  # the file says the same
    data = json.loads((root / "manifest.json").read_text())
    assert [(h["job_id"], h["state"]) for h in data["points"][1]["history"]] == [("7_1", "failed")]
    assert data["points"][1]["job_id"] == "9_0" and data["points"][1]["array_task_id"] == 0


# --- wait=true: this submission's outcome, never a stale one -------------------------------------


def _status(run_dir: Path, state: str, attempts: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    body = {
        "state": state,
        "attempts": [{"attempt": k + 1, "start": "2026-01-01T00:00:00+00:00"} for k in range(attempts)],
    }
    (run_dir / "status.json").write_text(json.dumps(body))


def test_wait_ignores_a_final_status_left_by_an_earlier_run(tmp_path, monkeypatch, spec):
    specs = [spec(tmp_path, i) for i in range(3)]
    for s in specs:  # all three ended in an earlier submission
        _status(Path(s.run_dir), "failed", 1)
    before = wait.attempt_counts(specs)
    assert before == [1, 1, 1]
    polls = []

    def sleep(_s):  # the jobs of this submission finish one poll after another
        polls.append(1)
        k = len(polls)
        if k <= 3:
            _status(Path(specs[k - 1].run_dir), "running" if k == 1 else "completed", 2)
        if k == 4:
            _status(Path(specs[0].run_dir), "completed", 2)

    monkeypatch.setattr(wait.time, "sleep", sleep)
    states = wait.wait_for(specs, ["9_0", "9_1", "9_2"], before, slurm_final=lambda ids: {})
    assert states == ["completed"] * 3
    assert len(polls) == 4, "returned before this submission's attempts were final"


def test_wait_ends_for_a_job_slurm_ended_without_a_status(tmp_path, monkeypatch, spec):
    specs = [spec(tmp_path, 0)]
    _status(Path(specs[0].run_dir), "completed", 1)
    monkeypatch.setattr(wait.time, "sleep", lambda _s: None)
    states = wait.wait_for(specs, ["9_0"], [1], gone_grace_s=0, slurm_final=lambda ids: {"9_0": "CANCELLED"})
    assert states == ["slurm:CANCELLED"]


def test_is_generated():
    assert folder.is_generated("${experiment.name}_${now:%Y%m%d-%H%M%S}")
    assert not folder.is_generated("lr_sweep")


def test_a_folder_left_by_a_command_that_failed_before_submitting_is_named_so_with_resume_too(tmp_path):
    """What a full disk left before issue 36.2 (code.partial/, an empty submissions.jsonl, no
    manifest): neither "a sweep was submitted there" nor resume's FileNotFoundError on manifest.json."""
    left = tmp_path / "full"
    (left / "code.partial").mkdir(parents=True)
    (left / SUBMISSIONS).write_text("")
    os.utime(left / SUBMISSIONS, (1e9, 1e9))  # left long ago (a claim of this instant may not be locked yet)
    for resume in (False, True):
        with pytest.raises(SweepFolderError, match=r"failed before submitting .* Remove it \(rm -r "):
            folder.check_before_validation(left, resume=resume, generated=False)
    (left / SUBMISSIONS).write_text('{"kind": "new"}\n')
    with pytest.raises(SweepFolderError, match="a sweep was submitted there"):
        folder.check_before_validation(left, resume=False, generated=False)

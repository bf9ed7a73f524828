"""Bad input refused before anything reaches Slurm, against the real local Slurm cluster (issue 13.2,
13.5-13.7, 12.5).

Each refusal is checked the way a user would see it: ``launch/sweep.py`` exits 2 with one line naming
the key and the fix, no traceback, no verl chatter, no job in ``squeue`` under the sweep's name and no
sweep folder. The local cluster's facts: 3 nodes x 8 CPUs, 8000 MB, 4 GPUs (gres), partitions
``gpu`` and ``urgent`` without MaxTime, ``MaxArraySize=64`` (slurm/local_cluster.sh).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from grpokit.config.point import PointSpec

pytestmark = pytest.mark.slurm


def jobs_named(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i %T"], capture_output=True, text=True, timeout=30)
    return out.stdout.split("\n") if out.stdout.strip() else []


def sweep_folders(logs: Path) -> list[str]:
    # logs/.hydra is Hydra's own output folder, not a sweep folder
    return sorted(p.name for p in logs.iterdir() if not p.name.startswith(".")) if logs.exists() else []


def refused(kit, args: list[str], logs: Path, name: str) -> list[str]:
    """Run a sweep that must be refused; returns its problem lines (asserting nothing was left)."""
    out = kit.run("sweep.py", ["-m", *args, f"sweep_name={name}"], timeout=400)
    text = out.stdout + out.stderr
    assert out.returncode == 2, text[-3000:]
    assert "nothing was submitted" in out.stderr and "Traceback" not in text
    assert "[validate_config]" not in text and "critic" not in text.lower(), "verl's per-point lines leaked"
    assert jobs_named(name) == [], "a job reached Slurm"
    assert sweep_folders(logs) == [], f"a refused sweep left {sweep_folders(logs)}"
    return [line for line in out.stderr.splitlines() if line.startswith("[")]


def two_points() -> list[str]:
    return ["verl.data.train_batch_size=8,16"]


@pytest.fixture
def maxtime_partition():
    """A partition with MaxTime=30 over node1, made for this test (the shared partitions have none)."""
    name = f"h5max{uuid.uuid4().hex[:6]}"
    subprocess.run(["scontrol", "create", f"PartitionName={name}", "Nodes=node1", "MaxTime=30", "State=UP"], check=True)
    yield name
    subprocess.run(["scontrol", "delete", f"PartitionName={name}"], check=False)


@pytest.mark.parametrize(
    ("request_args", "key", "fix"),
    [
        # `cluster=slurm` as the README writes it: 64 GB per point, nodes have 8000 MB
        ([], "cluster.mem_gb", "set cluster.mem_gb<=7"),
        (["cluster.mem_gb=1", "cluster.partition=debug"], "cluster.partition", "one of: gpu, urgent"),
        (["cluster.mem_gb=1", "cluster.cpus_per_task=16"], "cluster.cpus_per_task", "cluster.cpus_per_task<=8"),
        (["cluster.mem_gb=1", "cluster.gpus_per_node=8"], "cluster.gpus_per_node", "cluster.gpus_per_node<=4"),
        (["cluster.mem_gb=1", "cluster.nodes=4"], "cluster.nodes", "cluster.nodes<=3"),
    ],
)
def test_a_request_slurm_cannot_satisfy_is_refused_before_submission(
    kit, slurm, kit_overrides, tmp_path, request_args, key, fix
):
    lines = refused(kit, [*kit_overrides, "cluster=slurm", *request_args, *two_points()], tmp_path / "logs", "req")
    assert len(lines) == 1 and lines[0].startswith(f"[all points] {key}: "), lines
    if key == "cluster.partition":  # the partitions sinfo lists now (another test may add one for a while)
        listed = lines[0].split("one of: ", 1)[1].split(" (sinfo", 1)[0].split(", ")
        assert {"gpu", "urgent"} <= set(listed), lines
    else:
        assert fix in lines[0], lines


def test_a_time_limit_above_the_partitions_maxtime_is_refused(kit, slurm, kit_overrides, tmp_path, maxtime_partition):
    args = [*kit_overrides, *kit.slurm_cluster, f"cluster.partition={maxtime_partition}", "cluster.timeout_min=60"]
    lines = refused(kit, [*args, *two_points()], tmp_path / "logs", "maxtime")
    assert (
        len(lines) == 1 and "cluster.timeout_min: 60 min is above" in lines[0] and "cluster.timeout_min<=30" in lines[0]
    )


def test_a_dry_run_reports_the_same_refusal(kit, slurm, kit_overrides, tmp_path):
    lines = refused(kit, [*kit_overrides, "cluster=slurm", "dry_run=true", *two_points()], tmp_path / "logs", "dry")
    assert len(lines) == 1 and "cluster.mem_gb" in lines[0]


@pytest.mark.parametrize(
    ("bad", "key", "said"),
    [
        ("cluster.partiton=debug", "cluster.partiton", "did you mean cluster.partition"),
        ("+cluster.partiton=debug", "cluster.partiton", "did you mean cluster.partition"),
        ("verl.data.max_response_length=512,1k", "verl.data.max_response_length", "'1k' is not an integer"),
        ("verl.actor_rollout_ref.rollout.n=-3", "verl.actor_rollout_ref.rollout.n", "must be >= 1"),
        # the tiny model has 32768 positions (config.json max_position_embeddings)
        ("verl.data.max_response_length=100000", "verl.data.max_response_length", "max_response_length<=32256"),
        ("verl.trainer.n_gpus_per_node=8", "verl.trainer.n_gpus_per_node", "cluster.gpus_per_node=8"),
        ("cluster.nodes=two", "cluster.nodes", "'two' is not an integer"),
        ("hydra.launcher.max_num_timeout=3", "hydra.launcher.max_num_timeout", "runtime.max_timeout_requeues"),
    ],
)
def test_a_bad_key_or_value_is_refused_on_the_key_typed(kit, slurm, kit_overrides, tmp_path, bad, key, said):
    lines = refused(kit, [*kit_overrides, *kit.slurm_cluster, bad], tmp_path / "logs", "typo")
    assert len(lines) == 1 and f"] {key}: " in lines[0] and said in lines[0], lines


def test_submitit_names_and_the_earlier_names_reach_the_slurm_request(kit, slurm, kit_overrides, tmp_path):
    """What a hydra-submitit-launcher user types (``hydra.launcher.partition``) and the kit's earlier
    names (``cluster.time_min``, ``cluster.signal_lead_s``) make the request the new names make,
    checked by the real cluster (sbatch --test-only) in a dry run; each is said once as a note."""
    old = ["hydra.launcher.partition=urgent", "cluster.time_min=20", "cluster.signal_lead_s=90"]
    args = ["-m", *kit_overrides, *kit.slurm_cluster, *old, "dry_run=true", "sweep_name=names"]
    out = kit.run("sweep.py", args, timeout=590)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    notes = [line for line in out.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 3, notes
    assert any("use cluster.timeout_min" in n for n in notes) and any("use cluster.signal_delay_s" in n for n in notes)
    assert any(n.startswith("note: hydra.launcher.partition is cluster.partition") for n in notes)
    dry = (tmp_path / "logs" / "names" / "dry_run.md").read_text()
    assert "#SBATCH --partition=urgent" in dry and "#SBATCH --time=20" in dry and "#SBATCH --signal=B:USR2@90" in dry
    (point,) = kit.manifest(tmp_path / "logs" / "names")["points"]  # the overrides recorded: the new names
    assert {"cluster.partition=urgent", "cluster.timeout_min=20", "cluster.signal_delay_s=90"} <= set(
        point["overrides"]
    )


def test_a_sweep_larger_than_max_array_size_goes_out_as_several_arrays(kit, slurm, kit_overrides, tmp_path):
    # --hold (a setting a user would not pass) keeps the 66 tasks queued without running: the test is
    # about how Slurm receives them, and 66 trainer runs would not fit a 2-core machine.
    name = f"big{uuid.uuid4().hex[:6]}"
    args = [
        *kit_overrides,
        *kit.slurm_cluster,
        "cluster.additional_parameters={hold:true}",
        "verl.data.seed=range(0,66)",
    ]
    try:
        out = kit.run("sweep.py", ["-m", *args, f"sweep_name={name}"], timeout=590)
        assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
        points = kit.manifest(tmp_path / "logs" / name)["points"]
        arrays: dict[str, list[int]] = {}
        for p in points:
            arrays.setdefault(p["array_job_id"], []).append(p["array_task_id"])
        assert sorted(len(t) for t in arrays.values()) == [2, 64]
        assert all(sorted(t) == list(range(len(t))) for t in arrays.values())
        assert len({p["job_id"] for p in points}) == 66 and all(p["job_id"] for p in points)
        queued = subprocess.run(
            ["squeue", "-h", "-r", "-n", name, "-o", "%i"], capture_output=True, text=True, timeout=30
        ).stdout.split()
        assert sorted(queued) == sorted(p["job_id"] for p in points)
        for p in points:  # each point's spec is the one submitted in its array task
            spec = PointSpec.from_json((Path(p["run_dir"]) / "point.json").read_text())
            assert spec.name == p["name"]
    finally:
        subprocess.run(["scancel", "-n", name], check=False)


def test_a_submission_slurm_refuses_is_one_line_and_leaves_nothing_queued(slurm, tmp_path, bare_point):
    """The arrays of a sweep go out together or not at all (a request the checks could not see)."""
    from grpokit.submit.arrays import SubmissionError, submit_arrays

    name = f"half{uuid.uuid4().hex[:6]}"
    cluster = {
        "kind": "slurm",
        "partition": "gpu",
        "nodes": 1,
        "gpus_per_node": 1,
        "cpus_per_task": 1,
        "mem_gb": 1,
        "timeout_min": 5,
        "signal_delay_s": 60,
        "array_parallelism": 2,
        # hold: the first array must stay queued until it is cancelled, never run (no trainer here)
        "additional_parameters": {"hold": True},
    }

    def spec(i: int, partition: str) -> PointSpec:
        return bare_point(tmp_path, i, {**cluster, "partition": partition}, name)

    # two requests -> two arrays; Slurm takes the first and refuses the second (no such partition)
    specs = [spec(0, "gpu"), spec(1, "gpu"), spec(2, "nosuchpartition")]
    with pytest.raises(SubmissionError) as err:
        submit_arrays(tmp_path / "submitit", specs, name=name)
    message = str(err.value)
    assert "\n" not in message and "invalid partition" in message.lower() and "cluster.partition" in message
    assert len(err.value.cancelled) == 1 and "cancelled array" in message
    state = subprocess.run(
        ["scontrol", "show", "job", err.value.cancelled[0], "-o"], capture_output=True, text=True, timeout=30
    ).stdout
    assert "JobState=CANCELLED" in state
    assert jobs_named(name) == [] or all("CANCELLED" in j for j in jobs_named(name))


def reference_overrides(kit, model: Path, data: Path, out: Path) -> list[str]:
    """tests/data/reference_gsm8k_overrides.txt with ``verl.`` in front (the README's way to pass verl keys)."""
    text = (kit.repo / "tests" / "data" / "reference_gsm8k_overrides.txt").read_text()
    lines = "\n".join(x for x in text.splitlines() if not x.startswith("#")).format(model=model, data=data, out=out)
    return [("+verl." + o[1:]) if o.startswith("+") else "verl." + o for o in lines.split()]


def test_the_reference_runs_overrides_pass_as_the_readme_says(kit, slurm, tiny_model_dir, gsm8k_dir, tmp_path):
    """The reference run's list on Slurm: refused for its one setting that breaks requeue-and-resume
    (``trainer.resume_mode=disable``: it ran on one workstation, never requeued), naming that key
    and the fix; without it every other value reaches verl as the reference has it."""
    ref = reference_overrides(kit, tiny_model_dir, gsm8k_dir, tmp_path / "outputs")
    args = ["model=tiny", f"model.path={tiny_model_dir}", f"logs_root={tmp_path / 'logs'}", "cluster=slurm_local"]
    refused = kit.run("sweep.py", ["-m", *args, *ref, "dry_run=true", "sweep_name=ref"], timeout=400)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert "1 problem(s)" in refused.stderr and "verl.trainer.resume_mode: disable" in refused.stderr, refused.stderr
    assert "fix: drop verl.trainer.resume_mode" in refused.stderr
    ref = [o for o in ref if o != "verl.trainer.resume_mode=disable"]
    out = kit.run("sweep.py", ["-m", *args, *ref, "dry_run=true", "sweep_name=ref"], timeout=400)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "[validate_config]" not in out.stdout + out.stderr
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from grpokit.config.overrides import flat_base

    parser = OverridesParser.create()
    dry = (tmp_path / "logs" / "ref" / "dry_run.md").read_text()
    command = [line.strip().rstrip(" \\") for line in dry.split("## 000", 1)[1].splitlines() if "=" in line]
    emitted = {o.key_or_group: o.value() for o in parser.parse_overrides([c for c in command if " " not in c])}
    base = flat_base()
    for o in parser.parse_overrides(ref):
        key = o.key_or_group[len("verl.") :]
        if key == "trainer.logger":  # the kit keeps its file logger next to the user's (issue 12.8)
            assert {"console", "tensorboard"} <= set(emitted[key])
            continue
        got = emitted.get(key, base.get(key))  # not emitted: verl's own default, which the script repeats
        assert got == o.value(), f"{key}: the point runs {got!r}, the reference {o.value()!r}"


def test_cluster_slurm_local_runs_a_point_on_the_bundled_cluster_as_written(kit, slurm, kit_overrides, tmp_path):
    out = kit.run("sweep.py", ["-m", *kit_overrides, "cluster=slurm_local", "sweep_name=local1"], timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    points = kit.manifest(tmp_path / "logs" / "local1")["points"]
    (status,) = kit.wait_final([Path(p["run_dir"]) for p in points], timeout=600)
    assert status["state"] == "completed", json.dumps(status)[-2000:]

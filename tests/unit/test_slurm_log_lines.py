"""What the kit reads of Slurm's own output, on lines captured from this repository's Slurm 22.05
cluster (``tests/data/slurm_22.05/``: ``sbatch``, ``sbatch --test-only``, ``squeue``, ``scontrol show
job`` and a job's output with srun's and slurmstepd's lines), and the parameters and environment
of a job submitted from inside another: :mod:`grpokit.slurm.log_lines`,
:mod:`grpokit.slurm.named_jobs`, :mod:`grpokit.slurm.sbatch`, :mod:`grpokit.slurm.executor`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from grpokit.run_folder.liveness import stderr_cause
from grpokit.slurm import log_lines, named_jobs, sbatch
from grpokit.slurm.executor import dependent_parameters, executor_parameters
from grpokit.slurm.job_states import parse_scontrol

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "slurm_22.05"


def _read(name: str) -> str:
    return (CAPTURED / name).read_text()


def test_a_cancelled_jobs_output_reads_as_slurm_wrote_it():
    """``srun bash -c 'kill -9 $$'``, ``srun bash -c 'exit 3'``, then ``scancel`` of the job."""
    text = _read("job_cancelled_after_srun_errors.out")
    assert log_lines.job_ends(text) == [log_lines.JobEnd("1606", "node1", "2026-12-05T02:24:26", "cancel")]
    assert log_lines.task_signals(text) == [("node1", 9)]
    assert log_lines.task_exits(text) == [("node1", 3)]
    assert log_lines.failed_nodes(text) == [] and not log_lines.oom_killed(text)
    cause = stderr_cause(text.splitlines())
    assert (cause.word, cause.text) == ("cancelled", "cancelled (scancel) at 2026-12-05T02:24:26")


def test_why_slurm_ended_a_job():
    """slurmstepd's ``DUE TO ...`` tails (Slurm 22.05's wording) and an ``scancel`` by another user."""
    head = "slurmstepd: error: *** JOB 51 ON node1 CANCELLED AT 2026-12-03T10:00:00"
    cases = {
        " DUE TO PREEMPTION ***": ("preemption", None),
        " DUE TO TIME LIMIT ***": ("time_limit", None),
        " DUE TO JOB REQUEUE ***": ("requeue", None),
        " DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***": ("node_failure", None),
        " BY 1001 ***": ("cancel", "1001"),
    }
    for tail, (why, by) in cases.items():
        (end,) = log_lines.job_ends(head + tail)
        assert (end.why, end.by, end.host) == (why, by, "node1"), tail
    step = "slurmstepd: error: *** STEP 51.0 ON node2 CANCELLED AT 2026-12-03T10:00:00 DUE TO TIME LIMIT ***"
    assert log_lines.job_ends(step)[0].job == "51.0"
    assert log_lines.failed_nodes("srun: error: Node failure on node2") == ["node2"]
    assert log_lines.oom_killed("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=51.batch.")


def test_sbatchs_refusals_in_its_own_words():
    assert log_lines.sbatch_errors(_read("sbatch_refused_mem.txt")) == [
        "Memory specification can not be satisfied",
        "Batch job submission failed: Requested node configuration is not available",
    ]
    assert log_lines.sbatch_errors(_read("sbatch_bad_partition.txt")) == ["invalid partition specified: nosuch"]
    assert log_lines.sbatch_errors(_read("sbatch_test_only_ok.txt")) == []


def test_submitted_since_reads_squeues_local_submit_time():
    out = _read("squeue_id_submitted.txt")  # squeue -h --me --name seamcap -t all -o '%i|%V'
    local = dt.datetime.fromisoformat(out.strip().split("|")[1]).astimezone()
    assert named_jobs.submitted_since(out, (local - dt.timedelta(seconds=1)).isoformat()) == ["1606"]
    assert named_jobs.submitted_since(out, (local + dt.timedelta(seconds=1)).isoformat()) == []


def test_submitted_since_compares_squeue_local_times_with_the_records_utc():
    since = dt.datetime(2026, 12, 3, 12, 0, 0, tzinfo=dt.UTC)
    local = since.astimezone().replace(tzinfo=None)
    out = "\n".join(
        [
            f"20_0|{(local - dt.timedelta(seconds=1)).isoformat()}",  # before: not ours
            f"20_1|{local.isoformat()}",
            f"21|{(local + dt.timedelta(minutes=5)).isoformat()}",
            "22|N/A",
        ]
    )
    assert named_jobs.submitted_since(out, since.isoformat()) == ["20_1", "21"]


def test_scontrol_show_job_of_a_running_job():
    (state,) = parse_scontrol(_read("scontrol_show_job_running.txt")).values()
    assert (state.job_id, state.state, state.kit_state, state.exit_code, state.restarts) == (
        "1606",
        "RUNNING",
        "running",
        "0:0",
        0,
    )
    assert (state.elapsed_s, state.nodelist, state.reason) == (10, "node1", None)


def test_a_job_inside_a_job_drops_the_enclosing_jobs_input_variables():
    env = {"SLURM_MEM_PER_CPU": "500", "SBATCH_PARTITION": "gpu", "SLURM_CONF": "/etc/slurm/slurm.conf", "HOME": "/h"}
    assert sbatch.drop_job_variables(env) == ["SLURM_MEM_PER_CPU", "SBATCH_PARTITION"]
    assert env == {"SLURM_CONF": "/etc/slurm/slurm.conf", "HOME": "/h"}


class _Cluster:
    partition, account, qos, constraint, setup = "gpu", "acct", None, "h200", ["module load x"]
    timeout_min, nodes, gpus_per_node, cpus_per_task, mem_gb = 30, 1, 2, 4, 8
    array_parallelism, signal_delay_s, additional_parameters = 8, 120, None


def test_a_dependent_job_shares_the_arrays_mapping_of_the_site_settings():
    """The site keys and the ``mem`` spelling of a dependent job are the array's, through submitit's
    own renderer (the script submitit would write)."""
    params = dependent_parameters(_Cluster(), name="s-chain", dependency="afterok:120_3", timeout_min=10, mem_gb=2)
    array = executor_parameters(_Cluster(), name="s", num_points=2)
    assert params["partition"] == array["partition"] and params["account"] == array["account"] == "acct"
    assert "qos" not in params and "constraint" not in params and "gpus_per_node" not in params
    lines = sbatch.options(sbatch.render(params, map_count=None, folder="/tmp/x", command="true"))
    assert lines["dependency"] == "afterok:120_3" and lines["kill-on-invalid-dep"] == "yes"
    assert (lines["mem"], lines["time"], lines["cpus-per-task"], lines["partition"]) == ("2GB", "10", "1", "gpu")
    assert "mem" not in dependent_parameters(_Cluster(), name="c", dependency="afterany:1", timeout_min=5, mem_gb=None)

"""grpokit.slurm.job_states: parsing Slurm's client output and the squeue -> scontrol -> sacct order."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from grpokit.slurm import job_states as slurm_state
from grpokit.slurm.job_states import (
    expand_array_ids,
    job_states,
    parse_sacct,
    parse_scontrol,
    parse_squeue,
)

# Captured from slurm-wlm 22.05.8 (slurm/local_cluster.sh) with the formats the module uses.
SQUEUE_OUT = """\
4|PENDING|0:00||
6_[1-3%1]|PENDING|0:00|JobArrayTaskLimit|
6_0|RUNNING|1-02:03:04|None|node1
5|COMPLETED|0:05|None|node1
"""
SCONTROL_OUT = (
    "JobId=6 ArrayJobId=6 ArrayTaskId=2 ArrayTaskThrottle=1 JobName=wrap UserId=root(0) JobState=CANCELLED "
    "Reason=JobArrayTaskLimit Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:00 TimeLimit=365-00:00:00 NodeList= \n"
    "JobId=4 JobName=p.sh UserId=root(0) JobState=PENDING Reason=BeginTime Dependency=(null) Requeue=1 "
    "Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED NodeList= \n"
    "JobId=9 ArrayJobId=8 ArrayTaskId=1-3%1 JobState=PENDING Reason=JobArrayTaskLimit Restarts=0 "
    "ExitCode=0:0 RunTime=00:00:00\n"
)
SACCT_OUT = "12|PREEMPTED|100|0:15|node2|None\n12|TIMEOUT|3600|0:1|node3|None\n13_4|CANCELLED by 0|5|0:0|node1|None\n"


def test_expand_array_ids():
    assert expand_array_ids("6_[1-3%1]") == ["6_1", "6_2", "6_3"]
    assert expand_array_ids("7_[0,4-5]") == ["7_0", "7_4", "7_5"]
    assert expand_array_ids("7_[0-6:3]") == ["7_0", "7_3", "7_6"]
    assert expand_array_ids("12") == ["12"] and expand_array_ids("12_3") == ["12_3"]


def test_parse_squeue():
    st = parse_squeue(SQUEUE_OUT)
    assert st["4"].kit_state == "queued" and st["4"].nodelist is None
    assert st["6_3"].state == "PENDING" and st["6_3"].reason == "JobArrayTaskLimit"
    assert st["6_0"].kit_state == "running" and st["6_0"].elapsed_s == 93784 and st["6_0"].nodelist == "node1"
    assert st["5"].kit_state == "completed" and st["5"].source == "squeue"


def test_parse_scontrol():
    st = parse_scontrol(SCONTROL_OUT)
    assert st["6_2"].kit_state == "cancelled" and st["6_2"].source == "scontrol"
    assert st["4"].restarts == 1 and st["4"].reason == "BeginTime"
    assert sorted(k for k in st if k.startswith("8_")) == ["8_1", "8_2", "8_3"]


def test_parse_sacct_last_run_wins():
    st = parse_sacct(SACCT_OUT)
    assert st["12"].kit_state == "timeout" and st["12"].elapsed_s == 3600
    assert st["13_4"].state == "CANCELLED"


def test_missing_commands_never_fail(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no squeue, scontrol, sacct
    assert job_states(["1", "2_3"]) == {}


def test_sacct_disabled_is_skipped(monkeypatch):
    if shutil.which("sacct") is None:
        pytest.skip("sacct not installed")
    res = subprocess.run(["sacct", "-X", "-n"], capture_output=True, text=True, timeout=20)
    if "accounting storage is disabled" not in (res.stdout + res.stderr).lower():
        pytest.skip("this cluster has accounting enabled")
    assert slurm_state._sacct(["1"]) == {}


def test_order_asks_later_commands_only_for_the_rest(monkeypatch):
    calls = []

    def fake(name, answer):
        def lookup(ids, **_timeouts):
            calls.append((name, list(ids)))
            return {j: slurm_state.SlurmJobState(j, s, name) for j, s in answer.items()}

        return lookup

    monkeypatch.setattr(slurm_state, "_squeue", fake("squeue", {"1": "RUNNING"}))
    monkeypatch.setattr(slurm_state, "_scontrol", fake("scontrol", {"2": "COMPLETED", "1": "PENDING"}))
    monkeypatch.setattr(slurm_state, "_sacct", fake("sacct", {}))
    out = job_states(["1", "2", "3"])
    assert calls == [("squeue", ["1", "2", "3"]), ("scontrol", ["2", "3"]), ("sacct", ["3"])]
    assert out["1"].source == "squeue" and out["2"].source == "scontrol" and "3" not in out


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_real_cluster_array_job(slurm, tmp_path, monkeypatch):
    """Submit a small array job to the local test cluster and read it back through each command."""
    res = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--array=0-2%1",
            "-o",
            str(tmp_path / "%A_%a.out"),
            "-J",
            "grpokit-test-state",
            "--wrap",
            "sleep 60",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    array_id = res.stdout.strip().split(";")[0]
    try:
        ids = [f"{array_id}_{t}" for t in range(3)]
        st = job_states(ids)
        assert set(st) == set(ids)
        # Throttled to one task at a time: the last task cannot have started yet.
        assert st[ids[2]].kit_state == "queued" and st[ids[2]].source == "squeue"
        assert st[ids[0]].kit_state in ("queued", "running")
        # Without squeue on PATH, scontrol answers for the same ids.
        bindir = tmp_path / "bin"
        bindir.mkdir()
        for cmd in ("scontrol", "sacct"):
            os.symlink(shutil.which(cmd), bindir / cmd)
        monkeypatch.setenv("PATH", str(bindir))
        st2 = job_states(ids)
        assert {j: s.source for j, s in st2.items()} == dict.fromkeys(ids, "scontrol")
        assert st2[ids[2]].kit_state == "queued"
        monkeypatch.undo()
    finally:
        subprocess.run(["scancel", array_id], timeout=30, check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st = job_states([f"{array_id}_2"])
        if st and st[f"{array_id}_2"].kit_state == "cancelled":
            break
        time.sleep(1)
    assert st[f"{array_id}_2"].kit_state == "cancelled"


#: squeue(1) "JOB STATE CODES" of Slurm 22.05 (``man squeue`` on this cluster): code, state, the kit's word.
SQUEUE_JOB_STATE_CODES = [
    ("BF", "BOOT_FAIL", "failed"),
    ("CA", "CANCELLED", "cancelled"),
    ("CD", "COMPLETED", "completed"),
    ("CF", "CONFIGURING", "queued"),
    ("CG", "COMPLETING", "running"),
    ("DL", "DEADLINE", "timeout"),
    ("F", "FAILED", "failed"),
    ("NF", "NODE_FAIL", "failed"),
    ("OOM", "OUT_OF_MEMORY", "failed"),
    ("PD", "PENDING", "queued"),
    ("PR", "PREEMPTED", "preempted"),
    ("R", "RUNNING", "running"),
    ("RD", "RESV_DEL_HOLD", "queued"),
    ("RF", "REQUEUE_FED", "queued"),
    ("RH", "REQUEUE_HOLD", "queued"),
    ("RQ", "REQUEUED", "queued"),
    ("RS", "RESIZING", "running"),
    ("RV", "REVOKED", "cancelled"),
    ("SI", "SIGNALING", "running"),
    ("SE", "SPECIAL_EXIT", "queued"),
    ("SO", "STAGE_OUT", "running"),
    ("ST", "STOPPED", "running"),
    ("S", "SUSPENDED", "running"),
    ("TO", "TIMEOUT", "timeout"),
]


@pytest.mark.parametrize(
    ("code", "state", "word"), SQUEUE_JOB_STATE_CODES, ids=[s for _, s, _ in SQUEUE_JOB_STATE_CODES]
)
def test_every_slurm_job_state_has_one_word(code, state, word):
    """Each state of Slurm's docs through the one table, as each reader sees it: squeue's and
    scontrol's line, sacct's row, the shown state of a point whose job Slurm reports so."""
    from grpokit.run_folder.point_state import ShownEvidence, shown_state

    assert slurm_state.JOB_STATES[state].word == word and slurm_state.kit_word(state) == word
    squeue = parse_squeue(f"7|{state}|0:05|None|node1\n")["7"]
    scontrol = parse_scontrol(f"JobId=7 JobState={state} Reason=None ExitCode=0:0 RunTime=00:00:05\n")["7"]
    sacct = parse_sacct(f"7|{state}|5|0:0|node1|None\n")["7"]
    assert squeue.kit_state == scontrol.kit_state == sacct.kit_state == word
    assert squeue.is_live == (word in ("queued", "running"))
    shown = shown_state(ShownEvidence(recorded="running", submitted=True, slurm_word=word))
    assert shown == ("unknown" if word == "completed" else word)  # COMPLETED without the job's own record


def test_the_table_is_slurms_list_and_names_the_causes_of_three_end_states():
    assert sorted(slurm_state.JOB_STATES) == sorted(s for _, s, _ in SQUEUE_JOB_STATE_CODES)
    assert slurm_state.kit_word("CANCELLED by 1000") == "cancelled"  # sacct's wording
    assert slurm_state.kit_word("SOMETHING_NEW") == slurm_state.kit_word(None) == "unknown"
    causes = {s: m.node_failed for s, m in slurm_state.JOB_STATES.items() if m.cause}
    assert causes == {"NODE_FAIL": True, "BOOT_FAIL": True, "OUT_OF_MEMORY": False}
    assert slurm_state.state_cause("FAILED") is None and slurm_state.state_cause("NODE_FAIL").node_failed

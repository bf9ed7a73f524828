"""The crash-retry decision (grpokit.runtime.decisions.retry.decide): its table, row by row."""

from __future__ import annotations

import pytest

from grpokit.run_folder.status_record import Attempt
from grpokit.runtime.decisions.retry import crash_kind, decide


def crash(kind: str, *nodes: str, ended_by: str = "failed") -> Attempt:
    """An earlier attempt as status.json records it."""
    return Attempt(1, "2026-01-01T00:00:00+00:00", ended_by=ended_by, crash=kind, nodes=nodes)


@pytest.mark.parametrize(
    ("kind", "nodes", "earlier", "max_retries", "retry", "exclude", "backoff", "why"),
    [
        # first crash: retried once elsewhere, after the backoff
        (
            "RuntimeError",
            ["node1"],
            [],
            1,
            True,
            ("node1",),
            60,
            "retry 1 of runtime.max_retries=1 in 60 s, excluding node1",
        ),
        # time-outs and preemptions before it are not crashes: nothing spent
        ("RuntimeError", ["node1"], [crash("", "node2", ended_by="timeout")], 1, True, ("node1",), 60, "retry 1"),
        # the same kind again, on another node: stop, naming both nodes
        (
            "RuntimeError",
            ["node2"],
            [crash("RuntimeError", "node1")],
            3,
            False,
            (),
            0,
            "same crash twice on node1, node2 (RuntimeError): not retried",
        ),
        # another kind on another node, budget left: retried, every crashed node excluded, backoff doubled
        (
            "OutOfMemoryError",
            ["node2"],
            [crash("RuntimeError", "node1")],
            3,
            True,
            ("node1", "node2"),
            120,
            "retry 2 of",
        ),
        # another kind, budget spent
        (
            "OutOfMemoryError",
            ["node2"],
            [crash("RuntimeError", "node1")],
            1,
            False,
            (),
            0,
            "runtime.max_retries=1 spent",
        ),
        # the same kind on the same node (the exclusion could not apply): counts against the budget only
        ("exit 3", ["node1"], [crash("exit 3", "node1")], 2, True, ("node1",), 120, "retry 2 of"),
        # retries switched off
        ("RuntimeError", ["node1"], [], 0, False, (), 0, "runtime.max_retries=0"),
        # two nodes of a multi-node job, both excluded
        ("NcclError", ["node1", "node2"], [], 1, True, ("node1", "node2"), 60, "excluding node1, node2"),
    ],
)
def test_decision_table(kind, nodes, earlier, max_retries, retry, exclude, backoff, why):
    d = decide(kind=kind, nodes=nodes, earlier=earlier, max_retries=max_retries, backoff_s=60, in_slurm=True)
    assert (d.retry, d.exclude, d.backoff_s) == (retry, exclude, backoff), d
    assert why in d.why


def test_outside_slurm_nothing_requeues_the_point():
    d = decide(kind="RuntimeError", nodes=[], earlier=[], max_retries=1, backoff_s=60, in_slurm=False)
    assert not d.retry and "run the same command again" in d.why


def test_an_exclusion_that_would_leave_the_job_no_node_is_dropped_and_said():
    d = decide(
        kind="RuntimeError",
        nodes=["node3"],
        earlier=[crash("ValueError", "node1", "node2")],
        max_retries=2,
        backoff_s=10,
        in_slurm=True,
        partition_nodes=3,
    )
    assert d.retry and d.exclude == () and "no node excluded (the partition has 3 node(s))" in d.why


def test_a_point_pinned_to_its_nodes_is_retried_without_excluding_them():
    """``ExcNodeList`` overlapping the job's own ``--nodelist`` held it ``PENDING (BadConstraints)``
    for ever (seen on the local cluster: nodelist=node3, a crash on node3)."""
    d = decide(
        kind="PermissionError",
        nodes=["node3"],
        earlier=[],
        max_retries=1,
        backoff_s=60,
        in_slurm=True,
        partition_nodes=3,
        pinned="node3",
    )
    assert d.retry and d.exclude == () and "no node excluded (the point asks for nodelist=node3)" in d.why
    from types import SimpleNamespace

    from grpokit.runtime.processes.retry_job import _pinned_nodes

    def spec(extra):
        return SimpleNamespace(cluster=SimpleNamespace(additional_parameters=extra))

    assert _pinned_nodes(spec({"nodelist": "node3"})) == "node3" and _pinned_nodes(spec({})) is None


@pytest.mark.parametrize(
    ("line", "code", "kind"),
    [
        ("RuntimeError: CUDA error: an illegal memory access was encountered", 1, "RuntimeError"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", 1, "OutOfMemoryError"),
        ("ray.exceptions.RayTaskError", 1, "RayTaskError"),
        (None, 3, "exit 3"),
        ("", -9, "exit -9"),
    ],
)
def test_crash_kind_is_the_first_errors_class(line, code, kind):
    assert crash_kind(line, code) == kind


@pytest.mark.parametrize(
    ("earlier", "nodes", "retry", "why"),
    [
        # Ray did not start on node1 (after the in-job tries): a node problem, retried elsewhere
        ([], ["node1"], True, "retry 1 of runtime.max_retries=1 in 60 s, excluding node1"),
        # Ray failed again on another node: the failure follows the point (e.g. its own setting)
        (
            [crash("ray_failed", "node1", ended_by="ray_failed")],
            ["node2"],
            False,
            "same crash twice on node1, node2 (ray_failed): not retried",
        ),
        # a trainer crash before it spent the budget
        ([crash("RuntimeError", "node1")], ["node2"], False, "runtime.max_retries=1 spent"),
    ],
)
def test_a_ray_failure_is_retried_on_other_nodes_like_a_crash(earlier, nodes, retry, why):
    d = decide(kind="ray_failed", nodes=nodes, earlier=earlier, max_retries=1, backoff_s=60, in_slurm=True)
    assert d.retry is retry and why in d.why, d


class _SlurmHost:
    def in_slurm(self) -> bool:
        return True

    def node_names(self) -> list[str]:
        return ["node2"]


@pytest.mark.parametrize(
    ("ended_by", "state", "reason"),
    [
        ("ray_failed", "requeued", "Ray head did not start on node2 within 180 s: cannot connect to 127.0.0.1:1"),
        ("sidecar_failed", "failed", "sidecar answer exited with 1 during start-up, while Ray was starting"),
        ("invalid", "failed", "the point does not validate"),
    ],
)
def test_on_outcome_retries_a_ray_start_failure_and_keeps_its_reason(
    ended_by, state, reason, bare_point, tmp_path, monkeypatch
):
    from grpokit.run_folder import StatusFile
    from grpokit.runtime.decisions.outcome import Outcome
    from grpokit.runtime.processes import retry_job

    monkeypatch.setattr(retry_job, "partition_node_count", lambda: 3)
    spec = bare_point(tmp_path)
    status = StatusFile(spec.run_dir)
    status.start_attempt(target_step=4, slurm={})
    outcome, decision = retry_job.on_outcome(spec, status, Outcome("failed", ended_by, reason), tmp_path, _SlurmHost())
    assert outcome.state == state
    if ended_by != "ray_failed":
        assert decision is None and outcome.reason == reason
        return
    assert outcome.requeue and decision.exclude == ("node2",)
    attempt = status.record.attempts[-1]
    assert (attempt.crash, attempt.nodes, attempt.reason) == ("ray_failed", ("node2",), reason)
    assert outcome.reason == f"retry 1 of runtime.max_retries=1 in 60 s, excluding node2; {reason}"


@pytest.mark.parametrize(
    ("first_error_line", "before_first_step", "retried"),
    [
        # verl's tracker set-up on a node where the logger's package is missing: every node alike
        ("ModuleNotFoundError: No module named 'swanlab'", False, False),
        # W&B with no key and not offline (wandb.errors.UsageError): the settings, not the node
        ("wandb.errors.UsageError: api_key not configured (no-tty). call wandb.login(key=[your_api_key])", True, False),
        # verl's own refusal of a setting at start (its config dataclasses' __post_init__)
        ("ValueError: Rollout mode 'sync' has been removed. Please set `actor_rollout_ref.rollout.mode=async`", 1, 0),
        ("omegaconf.errors.ConfigAttributeError: Key 'no_such' is not in struct", False, False),
        # the same ValueError after training began may be the data or the node: the retry stays
        ("ValueError: NaN in the loss", False, True),
        # the node's faults keep the retry and the exclusion, at start as later
        ("RuntimeError: CUDA error: an illegal memory access was encountered", True, True),
        ("torch.OutOfMemoryError: CUDA out of memory.", True, True),
        ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", False, True),
        (None, True, True),  # an exit code without a traceback (a signal, the OOM killer)
    ],
)
def test_a_settings_error_is_not_retried_on_another_node(first_error_line, before_first_step, retried):
    kind = crash_kind(first_error_line, 1)
    d = decide(
        kind=kind,
        nodes=["node1"],
        earlier=[],
        max_retries=3,
        backoff_s=60,
        in_slurm=True,
        partition_nodes=4,
        before_first_step=bool(before_first_step),
    )
    assert d.retry is bool(retried), d.why
    if not retried:
        assert d.exclude == () and d.backoff_s == 0
        assert d.why.startswith("not retried: a settings error") and f"({kind})" in d.why
        assert "is the same on every node, no node excluded" in d.why
    else:
        assert d.exclude == ("node1",)

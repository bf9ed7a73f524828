"""The crash-retry decision (grpokit.runtime.retry.decide): its table, row by row."""

from __future__ import annotations

import pytest

from grpokit.runtime.retry import crash_kind, decide


def crash(kind: str, *nodes: str, ended_by: str = "failed") -> dict:
    """An earlier attempt as status.json records it."""
    return {"ended_by": ended_by, "crash": kind, "nodes": list(nodes)}


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

"""The GPUs a point gets are the ones its hardware profile was sized for (issue 35 item 5).

A hardware profile names the GPU memory it was sized for (``hardware.gpu_memory_gb``); a site maps
each profile to its nodes' Slurm features (``cluster.gpu_constraints``); the point's request asks
for them (``--constraint``), a partition none of whose nodes has them is refused before
submission, and a sweep over profiles without the mapping is refused (one request for all).
"""

from __future__ import annotations

import pytest

from grpokit.config.compose import compose_kit
from grpokit.config.point import build_point
from grpokit.slurm.cluster import constraint_matches, parse_facts
from grpokit.slurm.executor import executor_parameters
from grpokit.validate import check_hardware_requests
from grpokit.validate.slurm_request import check_facts

# `scontrol show partition -o` / `show node -o` lines as Slurm 22.05 prints them (fields cut)
PARTITIONS = "PartitionName=gpu AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxTime=UNLIMITED State=UP\n"
NODES = (
    "NodeName=a1 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 CPUEfctv=64 CPUTot=64 AvailableFeatures=h200,ib "
    "ActiveFeatures=h200,ib Gres=gpu:h200:8 RealMemory=2000000 Partitions=gpu State=IDLE\n"
    "NodeName=c1 Arch=x86_64 CoresPerSocket=16 CPUAlloc=0 CPUEfctv=32 CPUTot=32 AvailableFeatures=rtx4090 "
    "ActiveFeatures=rtx4090 Gres=gpu:4090:4 RealMemory=256000 Partitions=gpu State=IDLE\n"
)


def point(overrides: list[str], index: int = 0):
    return build_point(compose_kit(overrides), index=index, kit_overrides=overrides, swept={})


@pytest.mark.parametrize(
    ("constraint", "features", "matches"),
    [
        ("h200", ("h200", "ib"), True),
        ("h200|h100", ("h100",), True),
        ("h200&ib", ("h200",), False),
        ("h200,ib", ("h200", "ib"), True),
        ("rtx4090", ("h200", "ib"), False),
        ("[h200*2]", ("h200",), None),  # counts and brackets: sbatch --test-only judges them
    ],
)
def test_a_constraint_is_read_as_sbatch_reads_it(constraint, features, matches):
    assert constraint_matches(constraint, features) is matches


def test_each_profile_asks_for_its_nodes_features(base):
    mapping = [
        "cluster=slurm",
        "+cluster.gpu_constraints.h200=h200|h100",
        "+cluster.gpu_constraints.consumer_24gb=rtx4090",
    ]
    big = point([*base, *mapping, "hardware=h200"])
    small = point([*base, *mapping, "hardware=consumer_24gb"], index=1)
    assert big.cluster.constraint == "h200|h100" and small.cluster.constraint == "rtx4090"
    assert executor_parameters(big.cluster, name="s", num_points=1)["constraint"] == "h200|h100"
    assert any(
        "hardware=h200 (sized for 96 GB GPUs) asks Slurm for nodes with --constraint=h200|h100" in n
        for n in big.notices
    )
    assert check_hardware_requests([[big], [small]]) == []  # two requests, each profile its own GPUs
    # the user's own constraint wins, untouched
    own = point([*base, *mapping, "hardware=h200", "cluster.constraint=a100"])
    assert own.cluster.constraint == "a100"


def test_a_sweep_over_profiles_with_one_request_is_refused(base):
    big = point([*base, "cluster=slurm", "hardware=h200"])
    small = point([*base, "cluster=slurm", "hardware=consumer_24gb"], index=1)
    (problem,) = check_hardware_requests([[big, small]])
    assert problem.key == "hardware" and problem.point == "000, 001"
    assert "(consumer_24gb, h200) would share one Slurm request" in problem.message
    assert "cluster.gpu_constraints.consumer_24gb=<features> cluster.gpu_constraints.h200=<features>" in problem.fix
    local = [point([*base, "hardware=h200"]), point([*base, "hardware=consumer_24gb"], index=1)]
    assert check_hardware_requests([local]) == []  # one machine: its GPUs are what they are


def test_a_partition_without_the_features_is_refused_naming_what_it_has(base):
    facts = parse_facts(PARTITIONS, NODES, "MaxArraySize = 1001\n")
    assert facts.nodes["a1"].features == ("h200", "ib")
    spec = point([*base, "cluster=slurm", "cluster.partition=gpu", "cluster.constraint=b200"])
    (problem,) = check_facts(spec.cluster, facts)
    assert problem.key == "cluster.constraint"
    assert problem.message == (
        "no node of partition gpu has the features --constraint=b200 asks for (its nodes have: h200, ib, rtx4090)"
    )
    ok = point([*base, "cluster=slurm", "cluster.partition=gpu", "cluster.constraint=h200"])
    assert check_facts(ok.cluster, facts) == []
    # 8 GPUs per node exist only on the h200 node: with the rtx4090 constraint, no node fits
    eight = point(
        [*base, "cluster=slurm", "cluster.partition=gpu", "cluster.constraint=rtx4090", "cluster.gpus_per_node=8"]
    )
    (problem,) = check_facts(eight.cluster, facts)
    assert problem.key == "cluster.nodes"

"""What the cluster allows, asked of Slurm itself: partitions (``scontrol show partition -o``), nodes
(``scontrol show node -o``) and ``MaxArraySize`` (``scontrol show config``), parsed into
:class:`SlurmFacts`. :func:`run_slurm` runs a Slurm client whose answer a check needs (a failure or
no answer is :class:`SlurmQueryError` in Slurm's own words).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess

from grpokit.slurm import runner
from grpokit.slurm.times import parse_time_min

#: Seconds any one Slurm query may take before the check gives up (a slurmctld that does not answer).
QUERY_TIMEOUT_S = 20
_FIELD = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")
_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE", "N/A", ""}


class SlurmQueryError(RuntimeError):
    """A Slurm client command failed or did not answer; the message is Slurm's own."""


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """One node: ``cpus`` (CPUTot), ``memory_mb`` (RealMemory), ``gpus`` (gres ``gpu`` count),
    ``features`` (AvailableFeatures)."""

    name: str
    cpus: int
    memory_mb: int
    gpus: int
    partitions: tuple[str, ...]
    features: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class PartitionFacts:
    """One partition's limits; ``None`` means unlimited."""

    name: str
    state: str
    max_time_min: int | None
    max_nodes: int | None
    max_mem_per_node_mb: int | None
    max_cpus_per_node: int | None


@dataclasses.dataclass(frozen=True)
class SlurmFacts:
    """What the cluster allows: partitions, their nodes and ``MaxArraySize`` (array indices 0..N-1)."""

    partitions: dict[str, PartitionFacts]
    nodes: dict[str, NodeFacts]
    max_array_size: int

    def nodes_of(self, partition: str) -> list[NodeFacts]:
        return [n for n in self.nodes.values() if partition in n.partitions]


def _fields(line: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in _FIELD.finditer(line)}


def _int_or_none(text: str | None) -> int | None:
    if text is None or text.upper() in _UNLIMITED:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def parse_memory_mb(text: str) -> int | None:
    """``8000`` / ``8000M`` / ``64G`` -> MB (Slurm's units are binary: 1G = 1024M)."""
    if not text or text.upper() in _UNLIMITED:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip().upper())
    if not m:
        return None
    return int(float(m.group(1)) * _MEM_UNITS[m.group(2) or "M"])


def gres_gpus(gres: str) -> int:
    """GPUs in a node's ``Gres`` (``gpu:4``, ``gpu:a100:8(S:0-1)``, ``gpu:2,shard:8``); 0 for none."""
    total = 0
    for item in (gres or "").split(","):
        item = item.split("(", 1)[0].strip()
        if item == "gpu" or item.startswith("gpu:"):
            count = item.rsplit(":", 1)[-1]
            total += int(count) if count.isdigit() else 1
    return total


def run_slurm(cmd: list[str]) -> str:
    try:
        out = runner.run(cmd, timeout_s=QUERY_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise SlurmQueryError(f"`{' '.join(cmd)}` did not answer within {QUERY_TIMEOUT_S} s") from exc
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip().splitlines()
        raise SlurmQueryError(f"`{' '.join(cmd)}` failed: {said[-1] if said else f'exit {out.returncode}'}")
    return out.stdout


def parse_facts(partitions_text: str, nodes_text: str, config_text: str) -> SlurmFacts:
    """Facts from the outputs of ``scontrol show partition -o``, ``show node -o`` and ``show config``."""
    partitions = {}
    for line in partitions_text.splitlines():
        f = _fields(line)
        if "PartitionName" not in f:
            continue
        partitions[f["PartitionName"]] = PartitionFacts(
            name=f["PartitionName"],
            state=f.get("State", "UP"),
            max_time_min=parse_time_min(f.get("MaxTime")),
            max_nodes=_int_or_none(f.get("MaxNodes")),
            max_mem_per_node_mb=parse_memory_mb(f.get("MaxMemPerNode", "")),
            max_cpus_per_node=_int_or_none(f.get("MaxCPUsPerNode")),
        )
    nodes = {}
    for line in nodes_text.splitlines():
        f = _fields(line)
        if "NodeName" not in f:
            continue
        nodes[f["NodeName"]] = NodeFacts(
            name=f["NodeName"],
            cpus=_int_or_none(f.get("CPUEfctv")) or _int_or_none(f.get("CPUTot")) or 0,
            memory_mb=_int_or_none(f.get("RealMemory")) or 0,
            gpus=gres_gpus(f.get("Gres", "")),
            partitions=tuple(p for p in f.get("Partitions", "").split(",") if p),
            features=tuple(x for x in f.get("AvailableFeatures", "").split(",") if x and x != "(null)"),
        )
    return SlurmFacts(partitions=partitions, nodes=nodes, max_array_size=parse_max_array_size(config_text))


def constraint_matches(constraint: str, features: tuple[str, ...] | list[str]) -> bool | None:
    """Whether a node with ``features`` satisfies ``--constraint`` (``a|b``: either, ``a&b`` or
    ``a,b``: both; sbatch's manual, --constraint). None for the forms this does not read
    (brackets, counts ``a*2``, parentheses): sbatch --test-only judges those."""
    if any(c in constraint for c in "[]()*"):
        return None
    have = set(features)
    return any(all(term.strip() in have for term in re.split(r"[&,]", alt)) for alt in constraint.split("|"))


def query_facts() -> SlurmFacts | None:
    """Ask the cluster; ``None`` when this machine has no Slurm client tools.

    Raises:
        SlurmQueryError: scontrol is installed but slurmctld does not answer.
    """
    if not shutil.which("scontrol"):
        return None
    return parse_facts(
        run_slurm(["scontrol", "show", "partition", "-o"]),
        run_slurm(["scontrol", "show", "node", "-o"]),
        run_slurm(["scontrol", "show", "config"]),
    )


#: Slurm's default MaxArraySize, used when ``scontrol show config`` cannot be read.
DEFAULT_MAX_ARRAY_SIZE = 1001


def parse_max_array_size(config_text: str) -> int:
    """``MaxArraySize`` from ``scontrol show config`` output (array indices 0..N-1); 1001, Slurm's
    default, when the line is missing."""
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", config_text, re.MULTILINE)
    return int(m.group(1)) if m else DEFAULT_MAX_ARRAY_SIZE


def array_chunks(num_points: int, max_array_size: int) -> list[range]:
    """Point indices per job array: one array when it fits ``MaxArraySize``, else several.

    Slurm's array indices run from 0 to ``MaxArraySize - 1``, so one array holds at most
    ``max_array_size`` tasks. Example: ``array_chunks(130, 64) == [range(0, 64), range(64, 128),
    range(128, 130)]``.
    """
    size = max(int(max_array_size), 1)
    return [range(i, min(i + size, num_points)) for i in range(0, num_points, size)]


def max_array_size() -> int:
    """Slurm's ``MaxArraySize`` (``scontrol show config``); the default 1001 when it cannot be read."""
    try:
        return parse_max_array_size(run_slurm(["scontrol", "show", "config"]))
    except (SlurmQueryError, OSError):
        return DEFAULT_MAX_ARRAY_SIZE

"""What a dry run prints on the terminal: a short summary; ``dry_run.md`` keeps the full text.

``dry_run.md`` has every point's verl command and each array's ``#SBATCH`` lines (hundreds of lines
for a few points); the terminal gets the point count, the kit's notices, one line per Slurm array
and one compact line per point (its swept values), so 64 points stay readable.
"""

from __future__ import annotations

from pathlib import Path

from grpokit.config.point import PointSpec, kit_notices

MAX_POINT_LINES = 20  # more points: the first 15 and the last 4, with a count of those left out


def array_lines(specs: list[PointSpec], max_size: int | None = None) -> list[str]:
    """One line per job array the sweep would be submitted as: its points, nodes x GPUs, partition
    and time limit (minutes). [] for ``cluster=local``."""
    from grpokit.slurm.cluster import max_array_size
    from grpokit.submit.arrays import array_requests

    if not specs or specs[0].cluster.kind != "slurm":
        return []
    out = []
    for members, cluster in array_requests(specs, max_size or max_array_size()):
        first, last = specs[members[0]].name, specs[members[-1]].name
        which = first if len(members) == 1 else f"{first} .. {last}"
        out.append(
            f"  array of {len(members)}: {which}; {cluster.nodes} node(s) x {cluster.gpus_per_node} GPU(s), "
            f"partition {cluster.partition or '(default)'}, {cluster.timeout_min} min, "
            f"at most {cluster.array_parallelism} at once"
        )
    return out


def point_lines(specs: list[PointSpec]) -> list[str]:
    """One line per point: its name, then its swept values (``key=value``, the key's last part);
    beyond :data:`MAX_POINT_LINES` the middle ones are counted, not listed."""
    width = max(len(s.name) for s in specs)
    rows = [f"  {s.name:<{width}}  " + " ".join(f"{k.split('.')[-1]}={v}" for k, v in s.swept.items()) for s in specs]
    if len(rows) > MAX_POINT_LINES:
        rows = [*rows[:15], f"  ... {len(rows) - 19} more ...", *rows[-4:]]
    return [r.rstrip() for r in rows]


def verl_line(spec: PointSpec) -> str:
    """Which verl the points were validated against (the job's: version, folder, where it ran)."""
    from grpokit.validate import job_verl
    from grpokit.validate.job_environment import ask, job_python

    env = ask(job_python(spec.cluster.python))
    verl = job_verl.of(spec.cluster.python)
    if env.error is not None:
        asked = f"the job's Python {env.python}: not asked here ({env.error})"
        return f"verl: {verl.version} at {verl.folder} (validated here; {asked})"
    where = "in the job's Python, not this command's" if verl.remote else "here: the job's Python has the same"
    return f"verl: {verl.version} at {verl.folder} (validated against, {where}; the job's Python {env.python})"


def dry_run_summary(path: Path, specs: list[PointSpec], rows: list | None = None) -> str:
    """The terminal's text for a dry run that wrote ``path`` (dry_run.md) for ``specs``; ``rows``:
    :func:`grpokit.submit.provenance.sweep_sources` of ``specs`` (computed here when None)."""
    from grpokit.submit.provenance import summary_lines, sweep_sources

    arrays = array_lines(specs)
    lines = [f"Dry run of sweep {specs[0].sweep_name}: {len(specs)} point(s), nothing submitted"]
    lines += [f"Note: {notice}" for notice in kit_notices(specs)]
    lines.append(verl_line(specs[0]))
    lines += summary_lines(sweep_sources(specs) if rows is None else rows)
    if arrays:
        lines += [f"Slurm: {len(arrays)} job array(s)", *arrays]
    lines += ["Points:", *point_lines(specs)]
    lines.append(f"Each point's verl command and the Slurm request are in {path}")
    return "\n".join(lines)

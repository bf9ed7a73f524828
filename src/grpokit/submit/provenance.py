"""Where each setting of a point's verl command came from, for the dry run (issue 34 items 1 and 2).

Every ``key=value`` the trainer gets (:func:`grpokit.runtime.processes.trainer.command`) has one source:

- ``script``: the launch script of ``verl_script=<file>`` set it (read again here, as the sweep command
  read it: :func:`grpokit.config.verl_script.read_script` with this process's environment);
- ``axis``: a swept key of the sweep (``verl.<key>=a,b``);
- ``command``: a ``verl.<key>=...`` typed on the sweep command (over the script's value, if any);
- ``kit``: added by the kit for its contract, each with its reason (:data:`KIT_REASONS`);
- ``preset``: an experiment preset or hardware profile named on the command (``experiment=``,
  ``hardware=``; none applies with ``verl_script=`` unless named).

:func:`sources` is the pure decision; :func:`sweep_table` and :func:`summary_lines` render it: one table
per sweep (a value that differs between points reads ``per point``, the point's section lists it).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from grpokit.config.explicit import typed_verl_keys
from grpokit.config.point import PointSpec

#: What the kit adds to every point's verl command, and why (its contract: checkpoints under the run
#: folder, the metrics it reads, resume, a save before the time limit).
KIT_REASONS = {
    "trainer.default_local_dir": "checkpoints in the run folder, so a requeued attempt resumes from them",
    "trainer.project_name": "the sweep's name for verl's loggers",
    "trainer.experiment_name": "the point's name for verl's loggers",
    "trainer.nnodes": "the job's shape: the nodes Slurm gives the point (cluster.nodes)",
    "trainer.n_gpus_per_node": "the job's shape: the GPUs Slurm gives each node (cluster.gpus_per_node)",
    "trainer.logger": "verl's file logger added: the point's metrics.jsonl, which the kit reads",
    "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook": (
        "the kit's hooks in verl's Ray workers: the save before the time limit, stop requests"
    ),
    "actor_rollout_ref.model.gdn_prefill_backend": "this node has no FlashInfer: verl's Triton kernel instead",
}


@dataclasses.dataclass(frozen=True)
class Setting:
    """One ``key=value`` of the verl command. source: script / axis / command / kit / preset; why: the
    kit's reason (kit), the script's value it replaced (``script had X``), else ""."""

    key: str
    value: str
    source: str
    why: str = ""


def script_of(kit_overrides: list[str]) -> str | None:
    """The ``verl_script=<file>`` of a point's overrides, or None."""
    found = [o.split("=", 1)[1] for o in kit_overrides if o.lstrip("+").startswith("verl_script=")]
    return found[-1] if found and found[-1] not in ("", "null") else None


def script_settings(path: str, environ: Mapping[str, str]) -> dict[str, str]:
    """``{verl key: value}`` the script at ``path`` sets ({} if it cannot be read any more)."""
    from grpokit.config.verl_script import KIT_SET, ScriptError, read_script

    try:
        inv = read_script(os.path.expanduser(path), environ, KIT_SET)
    except ScriptError:
        return {}
    return {o.lstrip("+~").split("=", 1)[0]: o.split("=", 1)[1] for o in inv.overrides if "=" in o}


def verl_settings(spec: PointSpec) -> list[tuple[str, str]]:
    """``(key, value)`` of each override of the point's verl command, in order (``+`` dropped)."""
    from grpokit.runtime.processes import trainer

    base = len(spec.runtime.trainer_cmd)
    out = []
    for arg in trainer.command(spec, [])[base:]:
        key, sep, value = arg.partition("=")
        if sep:
            out.append((key.lstrip("+~"), value))
    return out


def sources(spec: PointSpec, script: Mapping[str, str] | None) -> list[Setting]:
    """Where each setting of ``spec``'s verl command came from (see the module docstring).

    ``script``: the script's ``{key: value}`` (:func:`script_settings`), None without ``verl_script=``.
    """
    typed = typed_verl_keys(spec.kit_overrides)
    swept = {k.removeprefix("verl.") for k in spec.swept}
    script = script or {}
    out = []
    for key, value in verl_settings(spec):
        if key in swept:
            out.append(Setting(key, value, "axis"))
        elif key in KIT_REASONS and (key not in typed or _unquoted(typed[key]) != _unquoted(value)):
            had = script.get(key) if key in script else typed.get(key)
            why = KIT_REASONS[key] + (f" (the script had {had})" if had is not None and key in script else "")
            out.append(Setting(key, value, "kit", why))
        elif key in script and key in typed and _unquoted(typed[key]) == _unquoted(script[key]):
            out.append(Setting(key, value, "script"))
        elif key in typed:
            why = f"over the script's {script[key]}" if key in script else ""
            out.append(Setting(key, value, "command", why))
        else:
            out.append(Setting(key, value, "preset" if not script else "kit", _preset_why(spec, script)))
    passed = {s.key for s in out}
    default = "verl's default: not passed"  # the kit leaves a value equal to verl's own default out
    for key, value in spec.swept.items():
        if key.removeprefix("verl.") not in passed and key.startswith("verl."):
            out.append(Setting(key.removeprefix("verl."), str(value), "axis", default))
    for key, value in typed.items():
        if key not in passed and key not in swept:
            source = "script" if key in script and _unquoted(script[key]) == _unquoted(value) else "command"
            out.append(Setting(key, value, source, default))
    return out


def _preset_why(spec: PointSpec, script: Mapping[str, str]) -> str:
    if script:
        return "the kit's default for this key"
    return f"experiment={spec.experiment.get('name', '?')} / hardware={spec.hardware.get('name', '?')}"


def _unquoted(value: str) -> str:
    """``value`` as compared: quotes dropped, a number in one spelling (Hydra writes ``1e-6`` as ``1e-06``),
    a boolean in one spelling (YAML's ``false`` is Python's ``False``)."""
    value = value.strip().strip("'\"")
    if value.lower() in ("true", "false"):
        return value.lower()
    try:
        return repr(float(value))
    except ValueError:
        return value


def sweep_sources(specs: list[PointSpec], environ: Mapping[str, str] | None = None) -> list[list[Setting]]:
    """:func:`sources` of every point (the script read once per sweep)."""
    path = script_of(specs[0].kit_overrides)
    script = script_settings(path, os.environ if environ is None else environ) if path else None
    return [sources(spec, script) for spec in specs]


def sweep_table(rows: list[list[Setting]], where: str = "") -> list[str]:
    """A Markdown table, one line per key: its value (``per point`` where points differ), its source
    and the reason; the kit's additions first."""
    order = {"kit": 0, "axis": 1, "command": 2, "script": 3, "preset": 4}
    by_key: dict[str, list[Setting]] = {}
    for point in rows:
        for s in point:
            by_key.setdefault(s.key, []).append(s)
    lines = [f"## Where each setting comes from{where}", "", "| key | value | from | why |", "|---|---|---|---|"]
    for key, found in sorted(by_key.items(), key=lambda kv: (order.get(kv[1][0].source, 9), kv[0])):
        values = {s.value for s in found}
        value = found[0].value if len(values) == 1 else "per point"
        if len(value) > 60:
            value = value[:57] + "..."
        lines.append(f"| {key} | {value} | {found[0].source} | {found[0].why} |".replace("|  |", "| |"))
    return [*lines, ""]


def summary_lines(rows: list[list[Setting]]) -> list[str]:
    """The terminal's lines: how many settings came from each source (the first point's), then each kit
    addition and why."""
    first = rows[0]
    counts: dict[str, int] = {}
    for s in first:
        counts[s.source] = counts.get(s.source, 0) + 1
    said = ", ".join(f"{n} swept" if src == "axis" else f"{n} from the {src}" for src, n in counts.items())
    out = [f"Settings of each point's verl command: {said}"]
    out += [f"  kit adds {s.key}: {s.why}" for s in first if s.source == "kit"]
    return out

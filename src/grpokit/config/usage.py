"""``python launch/sweep.py --help``: the kit's own usage (groups, main keys, examples), then Hydra's flags."""

from __future__ import annotations

import re
import textwrap

from grpokit.paths import CONFIG_DIR, config_groups, group_files

#: The keys ``--help`` lists, as typed, each with the setting whose field comment is its help
#: (grpokit.config.schema; docs/settings.md lists every one). Keys outside the kit's dataclasses
#: (verl's, the experiment's and the model's files) have their line in :data:`OTHER_KEYS`.
MAIN_KEYS = (
    ("verl.<verl key>", None),
    ("cluster.partition", "cluster.partition"),
    ("cluster.nodes", "cluster.nodes"),
    ("cluster.gpus_per_node", "cluster.gpus_per_node"),
    ("cluster.cpus_per_task", "cluster.cpus_per_task"),
    ("cluster.mem_gb", "cluster.mem_gb"),
    ("cluster.timeout_min", "cluster.timeout_min"),
    ("cluster.array_parallelism", "cluster.array_parallelism"),
    ("cluster.constraint", "cluster.constraint"),
    ("cluster.gpu_constraints.<profile>", "cluster.gpu_constraints"),
    ("cluster.python", "cluster.python"),
    ("cluster.signal_delay_s", "cluster.signal_delay_s"),
    ("cluster.additional_parameters.<option>", "cluster.additional_parameters"),
    ("experiment.data_dir", None),
    ("model.path", None),
    ("sweep_name", "sweep_name"),
    ("logs_root", "logs_root"),
    ("checkpoint_root", "checkpoint_root"),
    ("dry_run=true", "dry_run"),
    ("wait=true", "wait"),
    ("resume=true", "resume"),
    ("after=[merge,eval]", "after"),
    ("halving.rungs=[2,4]", "halving.rungs"),
    ("halving.keep", "halving.keep"),
    ("halving.metric", "halving.metric"),
    ("use_live_code=true", "use_live_code"),
    ("rehearse=true", "rehearse"),
    ("runtime.pruning.<rule>", "runtime.pruning"),
    ("runtime.wandb_mode", "runtime.wandb_mode"),
    ("runtime.max_timeout_requeues", "runtime.max_timeout_requeues"),
    ("runtime.save_deadline_s", "runtime.save_deadline_s"),
    ("runtime.ray_start_timeout_s", "runtime.ray_start_timeout_s"),
)

#: The lines of the keys that are not fields of the kit's settings dataclasses.
OTHER_KEYS = {
    "verl.<verl key>": "any key of verl's ppo_trainer config, verl's own name, e.g. "
    "verl.data.train_batch_size=8,16 verl.actor_rollout_ref.rollout.n=4,8 "
    "(+verl.<key>=v adds a key verl leaves open)",
    "experiment.data_dir": "the prepared data (launch/prepare_data.py)",
    "model.path": "the model's folder (launch/download.py, launch/make_tiny_model.py)",
}

#: Width of the key column and of a help line; a help is its first sentence, at most two lines.
_KEY_WIDTH, _WIDTH, _LINES = 30, 100, 2


def _summary(text: str) -> list[str]:
    """The help's first sentence, wrapped to :data:`_LINES` lines (`` ...`` where it is cut)."""
    first = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text.strip(), maxsplit=1)[0] if text else ""
    lines = textwrap.wrap(first, _WIDTH - _KEY_WIDTH - 2)
    if len(lines) > _LINES:
        lines = lines[:_LINES]
        lines[-1] = lines[-1][: _WIDTH - _KEY_WIDTH - 6].rstrip(",;: ") + " ..."
    return lines or [""]


def main_keys_text() -> str:
    """The ``Main keys`` block of ``--help``: each key with the help its field states."""
    from grpokit.config.settings_doc import setting_help

    out = ["Main keys (key=value; a,b,c sweeps a key with -m; every key: docs/settings.md):"]
    for label, key in MAIN_KEYS:
        lines = (
            textwrap.wrap(OTHER_KEYS[label], _WIDTH - _KEY_WIDTH - 2) if key is None else _summary(setting_help(key))
        )
        pad = " " * (_KEY_WIDTH + 2)
        first = f"  {label:<{_KEY_WIDTH}}" if len(label) <= _KEY_WIDTH else f"  {label}\n{pad}"
        out.append(first + lines[0])
        out += [pad + line for line in lines[1:]]
    return "\n".join(out) + "\n"


EXAMPLES = """\
Examples:
  python launch/sweep.py model=tiny                          # the default point, on this machine
  python launch/sweep.py -m cluster=slurm cluster.partition=gpu \\
      verl.data.train_batch_size=8,16 verl.actor_rollout_ref.rollout.n=4,8
  python launch/sweep.py -m cluster=slurm_local model=tiny   # the bundled local test cluster
  python launch/sweep.py -m cluster=slurm dry_run=true ...   # check everything, submit nothing
  python launch/sweep.py --cfg job                           # the composed config (add --resolve)
  python launch/status.py logs/<sweep>                       # then: report.py, resubmit.py
"""


def _first_comment(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("# ").rstrip()
    return ""


def _short(text: str, width: int = 88) -> str:
    if len(text) <= width:
        return text
    return text[: text.rfind(" ", 0, width - 3)].rstrip(",;:") + " ..."


def _flags(text: str) -> str:
    """Hydra's flags, one line each (the shell-completion recipe is left to --hydra-help)."""
    return "\n".join(line for line in text.splitlines() if line.startswith(("-", "Overrides")))


def _defaults() -> dict[str, str]:
    text = (CONFIG_DIR / "config.yaml").read_text()
    return dict(re.findall(r"^\s*-\s*(\w+):\s*(\w+)\s*(?:#.*)?$", text, re.MULTILINE))


def groups_text() -> str:
    """Each config group with its options, the default marked, and each option's first comment line."""
    defaults = _defaults()
    lines = ["Config groups (group=option; * is the default):"]
    for group in sorted(config_groups()):
        lines.append(f"  {group}:")
        for name, option in group_files(group).items():  # _x: shared parts, left out
            mark = "*" if defaults.get(group) == name else " "
            lines.append(f"    {mark}{name:<22} {_short(_first_comment(option.read_text()))}")
    return "\n".join(lines)


def usage() -> str:
    """The whole ``--help`` text: the kit's usage first, Hydra's own flags after."""
    from grpokit.config.hydra_internals import hydra_flags_help

    hydra_flags = _flags(hydra_flags_help())
    return "\n".join(
        [
            "usage: python launch/sweep.py [-m] [group=option ...] [key=value[,value...] ...]",
            "",
            "Compose verl GRPO points from the kit's config groups and verl's own keys, validate every",
            "point (verl's schema and validate_config, data, model, lengths, the Slurm request), then",
            "run them here (cluster=local) or submit them to Slurm as job arrays (cluster=slurm).",
            "",
            groups_text(),
            "",
            main_keys_text(),
            EXAMPLES,
            "Hydra's flags (python launch/sweep.py --hydra-help for Hydra's own help):",
            hydra_flags,
        ]
    )

"""The sweep's command line, checked against the composed kit config before Hydra runs anything.

What Hydra alone would do with a user's override, and what the kit does instead:

- a misspelt key (``cluster.partiton=debug``, ``verl.data.train_bach_size=8``): Hydra suggests
  ``+key``, which is then accepted and ignored; here it is refused with "did you mean ...".
- ``+key`` for a key the kit's files already set (the reference run's
  ``+actor_rollout_ref.model.override_config.attn_implementation=eager``, passed as ``+verl....``):
  Hydra refuses "Could not append to config"; here it is an update (handed on as ``++key``).
- ``sidecars.<name>.<key>=v`` for a sidecar key the experiment file leaves to its default (Hydra:
  "Key not in struct"): set (handed on as ``++key``), as a key of the typed sections is.
- a value of the wrong type (``verl.data.max_response_length=1k``) or a negative size
  (``verl.actor_rollout_ref.rollout.n=-3``): Hydra takes it and the failure surfaces later on a
  derived key, or not at all; here it is one problem on the key the user typed.

- a kit key under its earlier name (``cluster.time_min``): renamed to submitit's name
  (``cluster.timeout_min``) with one ``note:`` line (for one release;
  :data:`grpokit.config.schema.DEPRECATED`).
- ``hydra.launcher.partition=gpu`` (what a hydra-submitit-launcher user types): Hydra refuses the
  key of the kit's launcher; here it is ``cluster.partition=gpu`` (a submitit name ``cluster``
  does not have is refused naming the kit key to set).

Every value of a sweep (``a,b,c``, ``range(...)``) is checked. One :class:`Problem` per finding:
a bad value of a swept key names the points that hold it (:mod:`grpokit.validate.value_points`),
any other ``all points``. A key the kit derives other settings from (``verl.data.train_batch_size``
and ``verl.actor_rollout_ref.rollout.n`` -> ``rollout.max_num_seqs``:
:func:`grpokit.config.resolvers.derivation_inputs`) takes a number only, even where verl's
dataclass would leave a list to verl: the derivation would fail on the derived key instead.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpokit.config import verl_legacy
from grpokit.config.hydra_internals import child_node
from grpokit.config.key_hints import hints
from grpokit.config.overrides import flat_base
from grpokit.config.resolvers import derivation_inputs
from grpokit.config.schema import CLUSTER_MINIMUM, LAUNCHER_ELSEWHERE, ClusterConf, SidecarConf, rename_deprecated
from grpokit.paths import config_groups, group_files, kit_command
from grpokit.problems import Problem, note
from grpokit.validate.value_points import dimensions, points_with
from grpokit.validate.verl_check import _open_parent, suggest

ALL = "all points"
#: Kit mappings meant to be filled by the user (a new key below them is not a typo).
OPEN_KIT_PARENTS = ("runtime.env", "cluster.additional_parameters", "sidecars")
#: Leaf names of counts and lengths that must be positive (verl's and the kit's).
_SIZE_LEAF = re.compile(
    r"^(n|nnodes|n_gpus_per_node|total_epochs|total_training_steps|ppo_epochs|max_num_seqs|"
    r"max_num_batched_tokens|max_model_len|.*_size|.*_size_per_gpu|.*_length|.*_len|.*_len_per_gpu)$"
)
#: Kit keys with a lower bound: key -> smallest allowed value.
KIT_MINIMUM = {**{f"cluster.{k}": v for k, v in CLUSTER_MINIMUM.items()}, "runtime.max_timeout_requeues": 0}
_MAX_GROUP_COMBINATIONS = 16


def groups() -> set[str]:
    """The kit's config groups (``experiment``, ``model``, ``hardware``, ``cluster``)."""
    return config_groups()


def _values(override) -> list[Any]:
    if override.value_type is not None and override.value_type.name == "GLOB_CHOICE_SWEEP":
        return []
    if override.is_sweep_override():
        return list(override.sweep_iterator())
    return [override.value()]


def _node(cfg: DictConfig, key: str):
    """The config node at ``key`` (unresolved), or None when the key does not exist."""
    node: Any = cfg
    for part in key.split("."):
        if not OmegaConf.is_dict(node) or part not in node.keys():  # noqa: SIM118 (`in` hides ??? keys)
            return None
        node = child_node(node, part)
    return node


def _resolved(cfg: DictConfig, key: str) -> Any:
    try:
        value = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except Exception:
        return None
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _kit_open(key: str) -> bool:
    parent = key.rsplit(".", 1)[0]
    parts = key.split(".")
    if parts[0] == "sidecars" and len(parts) == 3:  # sidecars.<name>.<key>: one of SidecarConf's keys
        return parts[2] in SidecarConf._names()
    return any(parent == p or parent.startswith(p + ".") for p in OPEN_KIT_PARENTS) or parent.endswith(".env")


def _sidecar_default(cfg: DictConfig, key: str) -> bool:
    """``sidecars.<name>.<key>`` of a sidecar the config has, a key the experiment file leaves to its
    default (not in the composed config, yet a key of SidecarConf or of a sidecar kind): set without
    ``+`` as any other default is (the kind's check types it: grpokit.config.schema.sidecar_settings)."""
    parts = key.split(".")
    return (
        len(parts) == 3
        and parts[0] == "sidecars"
        and _node(cfg, f"sidecars.{parts[1]}") is not None
        and (parts[2] in SidecarConf._names())
    )


def _is_open(cfg: DictConfig, key: str) -> bool:
    """A new key below ``key``'s parent is expected (a free-form mapping), not a typo."""
    if key.startswith("verl."):
        return _open_parent(key[len("verl.") :], flat_base())
    if _kit_open(key):
        return True
    parent = _node(cfg, key.rsplit(".", 1)[0]) if "." in key else None
    return parent is not None and OmegaConf.is_dict(parent) and len(parent) == 0


def kit_suggest(cfg: DictConfig, key: str) -> str:
    """``did you mean ...`` for a kit key, from the keys next to it in the composed config."""
    if key.startswith("verl."):
        return suggest(key[len("verl.") :])
    parent, _, leaf = key.rpartition(".")
    node = _node(cfg, parent) if parent else cfg
    siblings = [str(k) for k in node.keys()] if node is not None and OmegaConf.is_dict(node) else []  # noqa: SIM118
    if key.startswith("sidecars.") and key.count(".") == 2:
        siblings = list(SidecarConf._names())
    close = hints(leaf, siblings)  # a misspelling or the words typed, never a guess across meanings
    if close:
        return "did you mean " + " or ".join(f"{parent + '.' if parent else ''}{c}" for c in close) + "?"
    if parent in groups():
        options = [name for name, p in group_files(parent).items() if _sets(p.read_text(), leaf)]
        if options:
            return f"{leaf} is a key of {parent}={' / '.join(options)}: add {parent}={options[0]}"
    if siblings:
        return f"{parent or 'the config'} has: {', '.join(sorted(siblings)[:12])}"
    return f"{parent} does not exist either ({kit_command('sweep', '--cfg job')} shows the config)"


def _sets(yaml_text: str, key: str) -> bool:
    """A group option's file sets ``key`` at its top level."""
    return bool(re.search(rf"^{re.escape(key)}:", yaml_text, re.MULTILINE))


def _is_mapping_with_new_keys(node, values: list[Any]) -> bool:
    if not OmegaConf.is_dict(node):
        return False
    have = set(node.keys())  # noqa: SIM118
    return any(isinstance(v, dict) and set(v) - have for v in values)


def _type_problem(key: str, value: Any, current: Any, derives: list[str] | None = None) -> Problem | None:
    """A value whose type cannot be what the key holds (an int where text came, ...).

    A verl key that verl's config dataclass declares is judged by that declaration
    (:func:`_declared_problem`); any other key by the type of its current value, except that an
    integer default of a key that is not a size takes a number (verl's YAML writes ``0`` for
    floats it has no dataclass for). ``derives``: the settings the kit derives from ``key``
    (:func:`grpokit.config.resolvers.derivation_inputs`); a list or mapping for such a key with a
    numeric current value is refused here, on the key typed, with the derived settings named.
    """
    if value is None or current is None:
        return None
    if derives and isinstance(value, (list, dict)) and _is_number(current):
        kind = "an integer" if isinstance(current, int) else "a number"
        sweep = (
            f"; to sweep these values: {key}={','.join(map(str, value))}" if isinstance(value, list) and value else ""
        )
        return Problem(
            ALL,
            key,
            f"{value!r} is not {kind} (the kit derives {', '.join(derives)} from it)",
            f"set {key}=<{kind.split()[-1]}>, e.g. {key}={current}{sweep}",
        )
    if value == "" and isinstance(current, bool):  # `key=` (an unset shell variable in a launch script)
        note(f"{key}= is empty: verl takes it (composition and validate_config pass) and reads it as false")
        return None
    if key.startswith("verl."):
        from grpokit.config.verl_types import declared_kinds

        allowed = declared_kinds(key[len("verl.") :])
        if allowed is not None:
            return _declared_problem(key, value, allowed, current)
    if isinstance(current, bool):
        if not isinstance(value, bool):
            return Problem(ALL, key, f"{value!r} is not true/false", f"set {key}=true or {key}=false")
        return None
    if isinstance(current, int):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return Problem(ALL, key, f"{value!r} is not an integer", f"set {key}=<integer>, e.g. {key}={current}")
        if value != int(value) and (not key.startswith("verl.") or _SIZE_LEAF.match(key.rsplit(".", 1)[-1])):
            return Problem(ALL, key, f"{value!r} is not an integer", f"set {key}=<integer>, e.g. {key}={current}")
        return None
    if isinstance(current, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return Problem(ALL, key, f"{value!r} is not a number", f"set {key}=<number>, e.g. {key}={current}")
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _at_points(problem: Problem, points: list[str] | None) -> list[Problem]:
    """``problem`` once per point that holds the bad value (None: every point, labelled so)."""
    if points is None:
        return [problem]
    return [dataclasses.replace(problem, point=name) for name in points]


def _declared_problem(key: str, value: Any, allowed: frozenset[str], current: Any) -> Problem | None:
    """``value`` against what verl's dataclass declares (:func:`grpokit.config.verl_types.kinds`).

    Only a value verl's field cannot hold is a problem: text for a number or a flag, a fraction for
    an integer, a number for a flag. Text for a text field, any number for a ``float``, lists,
    mappings and ``Any`` are left to verl.
    """
    if "any" in allowed or isinstance(value, (list, dict)):
        return None
    source = "verl's dataclass declares"
    if isinstance(value, bool):
        if allowed & {"bool", "str"}:
            return None
        return Problem(ALL, key, f"{value!r} is not a number ({source} {_words(allowed)})", f"set {key}=<number>")
    if isinstance(value, (int, float)):
        if "float" in allowed or "str" in allowed or ("int" in allowed and value == int(value)):
            return None
        if "int" in allowed:
            example = current if isinstance(current, int) and not isinstance(current, bool) else int(value)
            return Problem(
                ALL, key, f"{value!r} is not an integer ({source} int)", f"set {key}=<integer>, e.g. {key}={example}"
            )
        if "bool" in allowed:
            return Problem(ALL, key, f"{value!r} is not true/false", f"set {key}=true or {key}=false")
        return None
    if isinstance(value, str) and not allowed & {"str"}:
        if "bool" in allowed:
            return Problem(ALL, key, f"{value!r} is not true/false", f"set {key}=true or {key}=false")
        if "int" in allowed and "float" not in allowed:
            return Problem(
                ALL, key, f"{value!r} is not an integer ({source} int)", f"set {key}=<integer>, e.g. {key}={current}"
            )
        if allowed & {"int", "float"}:
            return Problem(ALL, key, f"{value!r} is not a number ({source} float)", f"set {key}=<number>")
    return None


def _words(allowed: frozenset[str]) -> str:
    return " or ".join(sorted(allowed))


def _minimum(key: str, default: Any) -> int | None:
    """The smallest value a size key allows (None: no bound known)."""
    if key in KIT_MINIMUM:
        return KIT_MINIMUM[key]
    if not key.startswith("verl.") or not _SIZE_LEAF.match(key.rsplit(".", 1)[-1]):
        return None
    if isinstance(default, bool) or (isinstance(default, int) and default < 0):
        return None  # verl's -1 means "all" / "off" here (fsdp_size, train_max_samples)
    return 0 if default == 0 else 1


def _sign_problem(key: str, value: Any, default: Any) -> Problem | None:
    low = _minimum(key, default)
    if low is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value >= low:
        return None
    what = "a size" if low >= 1 else "a count"
    return Problem(ALL, key, f"{value} is not {what} (must be >= {low})", f"set {key} to a value >= {low}")


def _compose_choices(group_overrides: list) -> list[DictConfig]:
    from grpokit.config.compose import compose_kit

    options = [[f"{o.key_or_group}={v}" for v in _values(o)] for o in group_overrides]
    combos = list(itertools.islice(itertools.product(*options), _MAX_GROUP_COMBINATIONS))
    return [compose_kit(list(c)) for c in combos]


def launcher_to_cluster(argv: list[str]) -> tuple[list[str], list[str], list[Problem]]:
    """``hydra.launcher.<name>=v`` (hydra-submitit-launcher's keys) as the kit's ``cluster.<name>=v``.

    The kit's launcher takes the Slurm request from ``cluster.*``, whose names are submitit's: a
    name ``cluster`` has is rewritten (one notice per key); one it does not have
    (:data:`~grpokit.config.schema.LAUNCHER_ELSEWHERE`, or unknown) is a problem naming the kit key.
    Returns (argv, notices, problems).
    """
    out, notices, problems = [], [], []
    for arg in argv:
        key, sep, value = arg.partition("=")
        bare = key.lstrip("+~")
        if not sep or arg.startswith("-") or not bare.startswith("hydra.launcher."):
            out.append(arg)
            continue
        name = bare[len("hydra.launcher.") :]
        leaf = name.split(".", 1)[0]
        if leaf in ClusterConf._names():
            new = f"cluster.{name}"
            out.append(f"{key[: len(key) - len(bare)]}{new}={value}")
            notices.append(f"{bare} is {new} in grpokit (the kit's launcher takes the Slurm request from cluster.*)")
        elif leaf in LAUNCHER_ELSEWHERE:
            problems.append(Problem(ALL, bare, "the kit's launcher has no such key", f"set {LAUNCHER_ELSEWHERE[leaf]}"))
        else:
            close = hints(leaf, ClusterConf._names())
            fix = f"did you mean cluster.{close[0]}?" if close else "the Slurm request is cluster.* (--help lists it)"
            problems.append(Problem(ALL, bare, "the kit's launcher has no such key", fix))
    return out, notices, problems


def check(argv: list[str]) -> tuple[list[str], list[Problem]]:
    """Check the overrides in ``argv``; returns (the argv to hand to Hydra, problems).

    The argv is the same except that ``+key=v`` for a key the composed config already has
    becomes ``++key=v`` (an update), a deprecated kit key gets its new name
    (:func:`grpokit.config.schema.rename_deprecated`) and ``hydra.launcher.<submitit name>`` becomes
    ``cluster.<name>`` (:func:`launcher_to_cluster`); each rename prints one ``note:`` line.
    Flags (``-m``, ``--cfg``) and unparsable overrides are left to Hydra.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    argv, notices = rename_deprecated(argv)
    argv, launcher_notices, launcher_problems = launcher_to_cluster(argv)
    for line in [*notices, *launcher_notices]:
        print(f"note: {line}", file=sys.stderr)
    if launcher_problems:
        return argv, launcher_problems
    positions = [i for i, a in enumerate(argv) if "=" in a and not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides([argv[i] for i in positions])
    except Exception:
        return argv, []  # Hydra reports its own grammar errors
    kit_groups = groups()
    group_overrides = [o for o in parsed if o.key_or_group in kit_groups and o.package is None]
    try:
        configs = _compose_choices(group_overrides)
    except Exception:
        return argv, []  # a bad group choice: Hydra names the options
    out = list(argv)
    problems: list[Problem] = []
    base = flat_base()
    try:
        dims = dimensions(parsed)  # the sweep's points, to name those a bad value is in
    except Exception:
        dims = []  # a sweep the basic sweeper would refuse itself (an interval): every problem is "all points"
    inputs = derivation_inputs(configs[0])
    for pos, o in zip(positions, parsed, strict=True):
        key = o.key_or_group
        if o in group_overrides or key.startswith("hydra") or "/" in key or o.is_delete():
            continue
        if o.is_sweep_override() and not _values(o) and o.value_type.name != "GLOB_CHOICE_SWEEP":
            problems.append(
                Problem(
                    ALL,
                    key,
                    f"{argv[pos].partition('=')[2]} has no values, so the sweep has no points",
                    f"give {key} at least one value, e.g. {key}=range(8,17,8)",
                )
            )
            continue
        nodes = [_node(cfg, key) for cfg in configs]
        exists = all(n is not None for n in nodes)
        if not exists and not (o.is_add() or o.is_force_add()) and _sidecar_default(configs[0], key):
            out[pos] = "++" + argv[pos]  # a sidecar key its file leaves to its default: set it
            continue
        if not exists:
            if (o.is_add() or o.is_force_add()) and key.startswith("verl.") and verl_legacy.legacy(key[5:]):
                continue  # +verl.reward_model.reward_kwargs...: each point refuses it naming the key verl reads
            if o.is_add() or o.is_force_add():
                if not _is_open(configs[0], key):
                    problems.append(
                        Problem(ALL, key, "no such key (it would be added and ignored)", kit_suggest(configs[0], key))
                    )
            elif _is_open(configs[0], key) and "." in key:
                problems.append(Problem(ALL, key, "no such key yet", f"add it with +{key}=..."))
            else:
                problems.append(Problem(ALL, key, "no such key", kit_suggest(configs[0], key)))
            continue
        if o.is_add():
            out[pos] = "+" + argv[pos]  # the kit already sets it: an update, not an append
        elif not o.is_force_add() and _is_mapping_with_new_keys(nodes[0], _values(o)):
            # key={a:1} on a mapping without `a` (cluster.additional_parameters={exclusive:true}): Hydra's
            # struct mode refuses the new key; merging it in is what the user asked for
            out[pos] = "++" + argv[pos]
        current = _resolved(configs[0], key)
        default = base.get(key[len("verl.") :], current) if key.startswith("verl.") else current
        texts = list(o.sweep_string_iterator()) if o.is_sweep_override() else []
        for position, value in enumerate(_values(o)):
            found = _type_problem(key, value, current if current is not None else default, inputs.get(key))
            found = found or _sign_problem(key, value, default if default is not None else current)
            if found:
                where = points_with(dims, o.get_key_element(), texts[position]) if position < len(texts) else None
                problems += _at_points(found, where)
    return out, problems

"""Where a verl launch script's trainer and config live: verl's ``main_ppo`` with ``ppo_trainer`` or
Megatron's ``ppo_megatron_trainer``, or a recipe's own entry module with its own config folder (issue 34).

:func:`locate` turns what a script asks (``python -m <module> --config-path <dir> --config-name <name>``,
:class:`grpokit.config.verl_script.VerlInvocation`) into an :class:`Entry`: the module the job runs, the
absolute config folder (None: verl's own ``trainer/config``), the config name, and the folder that
must be on ``PYTHONPATH`` for the module to import (a recipe checkout's root). Nothing is imported.

Hydra's rules, which the entry itself would follow: ``--config-path`` is absolute or relative to the
file that declares ``@hydra.main`` (the entry module); without it, the ``config_path`` and
``config_name`` of that decorator (read from the module's source with :mod:`ast`). verl's
``main_ppo`` declares ``config_path="config", config_name="ppo_trainer"``.

A recipe module (``recipe.dapo.main_dapo``) is looked for as ``<root>/recipe/dapo/main_dapo.py`` under,
in order: the command's ``recipe_root=<checkout>``, the script's folder and each folder above it (verl's
and verl-recipe's scripts are run from the checkout's root), and the working folder. A relative
``--config-path`` the module's folder does not have is then tried against the script's folder and the
root. Each thing not found is :class:`ScriptError`, one line naming it and the fix.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from grpokit.config.verl_schema import (
    MEGATRON_CONFIG_NAME,
    VERL_CONFIG_NAME,
    VerlConfigRef,
    base_of,
    config_groups,
    verl_config_dir,
)


class ScriptError(ValueError):
    """The script cannot be read as a verl launch: one line naming file, line and cause, and the fix."""


#: verl's trainer entry (its config folder is verl's ``trainer/config``).
MAIN_PPO = "verl.trainer.main_ppo"
#: The configs of verl's own folder the kit composes for ``main_ppo`` (FSDP's and Megatron's).
VERL_CONFIGS = (VERL_CONFIG_NAME, MEGATRON_CONFIG_NAME)
#: verl keys the kit's contract writes (checkpoints, names, job shape, metrics, resume, its Ray hook):
#: a recipe config without one of them cannot be run by the kit.
CONTRACT_KEYS = (
    "trainer.default_local_dir",
    "trainer.project_name",
    "trainer.experiment_name",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "trainer.logger",
    "trainer.resume_mode",
    "trainer.save_freq",
    "ray_kwargs.ray_init",
)


@dataclasses.dataclass(frozen=True)
class Entry:
    """The trainer a point runs: ``python -m <module> [--config-path <config_dir>] --config-name <config_name>
    [<groups>]``.

    config_dir: absolute folder, None for verl's own. pythonpath: the folder the job puts first on
    ``PYTHONPATH`` (a recipe checkout's root), None for verl's entry. groups: the script's choices of
    the config's Hydra groups (``("model_engine=megatron",)``), passed to verl as the script passes them.
    """

    module: str = MAIN_PPO
    config_name: str = VERL_CONFIG_NAME
    config_dir: str | None = None
    pythonpath: str | None = None
    groups: tuple[str, ...] = ()

    @property
    def ref(self) -> VerlConfigRef:
        return VerlConfigRef(self.config_name, self.config_dir, self.groups)

    def is_default(self) -> bool:
        return self == Entry()

    def trainer_args(self) -> list[str]:
        """``-m <module>`` and its config flags, as the job's command line spells them."""
        args = ["-m", self.module]
        if self.config_dir:
            args += ["--config-path", self.config_dir]
        if not self.is_default():
            args += ["--config-name", self.config_name]
        return [*args, *self.groups]

    def kit_overrides(self) -> list[str]:
        """The sweep command's overrides that select this entry (the kit's ``verl_entry.*`` and its
        ``verl_base@verl`` option), nothing for verl's default."""
        if self.is_default():
            return []
        from grpokit.config.overrides import format_value

        out = [f"verl_base@verl={self.ref.option}"]
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value != getattr(Entry(), field.name):
                out.append(f"++verl_entry.{field.name}={format_value(value)}")  # {} in RootConf: added
        return out

    @classmethod
    def of(cls, value: object) -> Entry:
        """An :class:`Entry` from a mapping (``point.json``, the kit's ``verl_entry`` node); {} or None: the default."""
        if not value:
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in dict(value).items() if k in names and v is not None}  # type: ignore[call-overload]
        if "groups" in given:  # a JSON list or the kit's ListConfig
            given["groups"] = tuple(str(g) for g in given["groups"])
        return cls(**given)


def hydra_main_defaults(source: Path) -> tuple[str | None, str | None]:
    """``(config_path, config_name)`` of the ``@hydra.main(...)`` in ``source`` (None each when absent)."""
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError, ValueError):
        return None, None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "main":
            kwargs = {k.arg: k.value for k in node.keywords}
            if "config_name" in kwargs or "config_path" in kwargs:
                path, name = kwargs.get("config_path"), kwargs.get("config_name")
                return (
                    path.value if isinstance(path, ast.Constant) else None,
                    name.value if isinstance(name, ast.Constant) else None,
                )
    return None, None


def _roots(script: Path, recipe_root: str | None, cwd: Path) -> list[Path]:
    out = [Path(recipe_root).expanduser().resolve()] if recipe_root else []
    out += [script.resolve().parent, *script.resolve().parent.parents, cwd.resolve()]
    return list(dict.fromkeys(out))


def group_choices(overrides, ref: VerlConfigRef) -> tuple[str, ...]:
    """The overrides that choose an option of one of ``ref``'s root-level config groups
    (:func:`grpokit.config.verl_schema.config_groups`): ``name=<choice>`` without ``+``/``~`` or a dot,
    as Hydra reads ``model_engine=megatron``. In their order."""
    groups = config_groups(ref)
    return tuple(
        o for o in overrides if "=" in o and o[0] not in "+~" and o.split("=", 1)[0] in groups and "," not in o
    )


def locate(inv, script: Path, recipe_root: str | None = None, cwd: Path | None = None) -> Entry:
    """The :class:`Entry` of the script's verl command ``inv`` (a :class:`grpokit.config.verl_script.VerlInvocation`:
    its ``module``, ``config_path``, ``config_name``, ``overrides``, ``source``; see the module docstring), with
    the overrides that choose a config group's option (:func:`group_choices`) as its ``groups``.

    Raises:
        ScriptError: verl's ``main_ppo`` with a config the kit does not compose; a recipe module, its
            config folder or its config file not found (one line naming what and where, and the fix).
    """
    cwd = cwd or Path.cwd()
    name = (inv.config_name or "").removesuffix(".yaml") or None
    if inv.module == MAIN_PPO:
        folder = verl_config_dir()
        given = Path(inv.config_path).expanduser() if inv.config_path else None
        if given is not None and given.is_absolute() and given.resolve() != folder.resolve():
            raise ScriptError(
                f"verl_script={script}: --config-path={inv.config_path} ({inv.source}) is not verl's config "
                f"folder ({folder}); main_ppo with a config folder of its own is a recipe: run it with the "
                "recipe's entry module, or drop --config-path"
            )
        name = name or VERL_CONFIG_NAME
        if name not in VERL_CONFIGS:
            raise ScriptError(
                f"verl_script={script}: --config-name={inv.config_name} ({inv.source}); the kit composes verl's "
                f"{' and '.join(VERL_CONFIGS)} for {MAIN_PPO}: use one of them"
            )
        return Entry(config_name=name, groups=group_choices(inv.overrides, VerlConfigRef(name)))
    relative = Path(*inv.module.split("."))
    roots = _roots(script, recipe_root, cwd)
    source = next((r / relative.with_suffix(".py") for r in roots if (r / relative.with_suffix(".py")).is_file()), None)
    if source is None:
        source = next((r / relative / "__main__.py" for r in roots if (r / relative / "__main__.py").is_file()), None)
    if source is None:
        raise ScriptError(
            f"verl_script={script}: its entry {inv.module} ({inv.source}) is not found as {relative}.py under "
            f"{', '.join(str(r) for r in roots[:3])}: pass recipe_root=<your verl-recipe checkout> on the sweep command"
        )
    root = source.parents[len(relative.parts) - (0 if source.name == "__main__.py" else 1)]
    main_path, main_name = hydra_main_defaults(source)
    path = inv.config_path or main_path
    name = name or (main_name or "").removesuffix(".yaml") or None
    if not path or not name:
        raise ScriptError(
            f"verl_script={script}: {inv.module} ({source}) declares no @hydra.main config and the command gives "
            "no --config-path/--config-name: add them to the script's command"
        )
    candidates = (
        [Path(path).expanduser()]
        if Path(path).expanduser().is_absolute()
        else [
            source.parent / path,
            script.resolve().parent / path,
            root / path,
        ]
    )
    folder = next((c.resolve() for c in candidates if (c / f"{name}.yaml").is_file()), None)
    if folder is None:
        raise ScriptError(
            f"verl_script={script}: config {name}.yaml not found in --config-path={path} (looked in "
            f"{', '.join(str(c) for c in dict.fromkeys(candidates))}): fix --config-path in the script"
        )
    groups = group_choices(inv.overrides, VerlConfigRef(name, str(folder)))
    return Entry(module=inv.module, config_name=name, config_dir=str(folder), pythonpath=str(root), groups=groups)


def check_config(entry: Entry, script: Path) -> None:
    """A recipe's config composes with verl's own Hydra composition (verl's folder on the search path)
    and has every key of the kit's contract (:data:`CONTRACT_KEYS`: a config that extends verl's
    ``ppo_trainer`` has them), and so does a config with the script's group choices (``model_engine=megatron``);
    nothing to check for verl's own configs as they are.

    Raises:
        ScriptError: it does not compose (Hydra's first line), or it lacks a contract key (one line
            naming the file, the key and the fix).
    """
    if not entry.config_dir and not entry.groups:
        return
    from omegaconf import OmegaConf

    where = f"{entry.config_dir or verl_config_dir()}/{entry.config_name}.yaml"
    try:
        cfg = base_of(entry.ref)
    except Exception as exc:  # noqa: BLE001 - Hydra raises several types; its first line says what
        if not entry.config_dir:
            raise ScriptError(
                f"verl_script={script}: verl's {entry.config_name} does not compose with the script's "
                f"{' '.join(entry.groups)} ({str(exc).splitlines()[0]}): choose an option of verl's config folder "
                f"({verl_config_dir()})"
            ) from exc
        raise ScriptError(
            f"verl_script={script}: {entry.module}'s config {where} does not compose with verl's config folder on "
            f"the search path ({str(exc).splitlines()[0]}): fix the recipe's defaults list"
        ) from exc
    for key in CONTRACT_KEYS:
        if OmegaConf.select(cfg, key, default="<missing>") == "<missing>":
            raise ScriptError(
                f"verl_script={script}: {entry.module}'s config {where} has no {key}, which the kit sets "
                "(checkpoints, metrics, resume and its hook in verl's workers need verl's trainer keys): the kit "
                "runs recipes whose config extends verl's ppo_trainer (defaults: [ppo_trainer, _self_])"
            )

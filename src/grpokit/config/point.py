"""One sweep point: everything the job needs, as plain data that pickles and serialises to JSON.

The same :class:`PointSpec` is built on every path (the sweep's launcher, ``sbatch
slurm/train.sbatch``, a local run) from a composed kit config, and it is the only argument the
in-job driver receives.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from grpokit.config.explicit import raise_unresolvable, refuse_replaced, typed_verl_keys, yield_presets
from grpokit.config.overrides import format_value, verl_overrides
from grpokit.config.rehearsal_plan import rehearsal_sidecars, rehearsal_trainer_env
from grpokit.config.schema import ClusterConf, RuntimeConf, SidecarConf, section_notices, sidecar_settings
from grpokit.config.verl_entry import Entry
from grpokit.config.verl_schema import use
from grpokit.problems import Problem, SweepValidationError
from grpokit.rehearsal import TRAINER_CMD as REHEARSAL_TRAINER_CMD

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


@dataclasses.dataclass(kw_only=True)
class PointSpec:
    """A resolved sweep point.

    Attributes:
        sweep_name: the sweep folder's name under ``logs_root``.
        index: the point's number in the sweep (0-based).
        name: ``NNN_<swept values>``, the run folder's name and verl's ``trainer.experiment_name``.
        run_dir: absolute path of the run folder (docs/run-folder.md).
        checkpoint_dir: verl's ``trainer.default_local_dir`` for this point.
        kit_overrides: the command-line overrides that made this point.
        swept: ``{key: value}`` of the swept keys only.
        verl_overrides: verl's command-line overrides (``key=value`` / ``+key=value``).
        experiment, model, hardware: the resolved kit sections (mappings).
        cluster: the job's shape and Slurm request (:class:`~grpokit.config.schema.ClusterConf`).
        runtime: the in-job driver's settings (:class:`~grpokit.config.schema.RuntimeConf`).
        sidecars: ``{name: settings}`` (:class:`~grpokit.config.schema.SidecarConf` each).
        notices: what the kit changed in the user's settings on its own, one line each (e.g. the
            file logger added to ``trainer.logger``); the sweep prints each once.
        verl_entry: the trainer's entry and the verl config it composes
            (:class:`grpokit.config.verl_entry.Entry` as a mapping; {}: verl's ``main_ppo`` with ``ppo_trainer``).
    """

    sweep_name: str
    index: int
    name: str
    run_dir: str
    checkpoint_dir: str
    kit_overrides: list[str]
    swept: dict[str, Any]
    verl_overrides: list[str]
    experiment: dict[str, Any]
    model: dict[str, Any]
    cluster: ClusterConf
    runtime: RuntimeConf
    sidecars: dict[str, SidecarConf]
    hardware: dict[str, Any] = dataclasses.field(default_factory=dict)
    notices: list[str] = dataclasses.field(default_factory=list)
    verl_entry: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        # a mapping (point.json, a test) becomes the typed section; earlier names are moved
        self.cluster = ClusterConf.of(self.cluster)
        self.runtime = RuntimeConf.of(self.runtime)
        self.sidecars = {name: SidecarConf.of(value) for name, value in self.sidecars.items()}

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["sidecars"] = {name: spec.flat() for name, spec in self.sidecars.items()}  # as the file has them
        return json.dumps(data, indent=2, default=str)

    @classmethod
    def from_json(cls, text: str) -> PointSpec:
        return cls(**json.loads(text))

    def verl_value(self, key: str) -> Any:
        """The emitted value of a verl key, as text (``None`` when the point leaves verl's default)."""
        for item in self.verl_overrides:
            k, _, v = item.lstrip("+").partition("=")
            if k == key:
                return v
        return None

    def loggers(self) -> list[str]:
        """verl's ``trainer.logger`` backends the job passes: :func:`logger_backends` of the emitted
        override, read in Hydra's override grammar (``[console,wandb,file]`` -> three names)."""
        from grpokit.config.override_step import parse

        text = self.verl_value("trainer.logger")
        return logger_backends(None if text is None else parse([f"trainer.logger={text}"])[0].value())


#: verl's logger backend that writes ``$VERL_FILE_LOGGER_PATH`` (``verl/utils/tracking.py::FileLogger``).
FILE_LOGGER = "file"

#: The values of ``runtime.wandb_mode`` (W&B's own modes; checked before submission by
#: grpokit.validate.kit_checks, passed as ``WANDB_MODE`` by grpokit.runtime.trackers).
WANDB_MODES = ("online", "offline", "disabled")


def logger_backends(value: Any) -> list[str]:
    """verl's ``trainer.logger`` as a list of backend names, in order.

    ``value`` is what verl's ``Tracking`` takes: one name (a string), a list of names (a list, tuple
    or OmegaConf ``ListConfig``), or None (no backend: ``[]``). The one reader of that key: the
    point's build, the checks before submission (grpokit.validate.job_needs) and the job
    (grpokit.runtime.trackers) all go through it.
    """
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def with_file_logger(value: Any) -> tuple[list[str], str | None]:
    """verl's ``trainer.logger`` (a string, a list, or None) with ``file`` added when missing.

    Returns the backends to run and, when ``file`` was added, the one-line notice saying so.
    verl's ``Tracking`` takes a string or a list; the kit always passes a list.
    """
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    given = logger_backends(value)
    if FILE_LOGGER in given:
        return given, None
    kept = [*given, FILE_LOGGER]
    return kept, (
        f"verl.trainer.logger={format_value(value)} leaves out verl's file logger; the kit adds it "
        f"(trainer.logger={format_value(kept)}): its metrics.jsonl feeds resume bookkeeping, status.py and report.py"
    )


def kit_notices(specs: list[PointSpec]) -> list[str]:
    """The distinct notices of ``specs``, in first-seen order (printed once per sweep)."""
    return list(dict.fromkeys(n for spec in specs for n in spec.notices))


def point_name(index: int, swept: dict[str, Any]) -> str:
    """``NNN`` plus the swept values, e.g. ``003_train_batch_size-16__n-4``."""
    parts = [_SLUG.sub("-", f"{k.rsplit('.', 1)[-1]}-{v}") for k, v in swept.items()]
    slug = "__".join(parts).strip("-")[:120]
    return f"{index:03d}_{slug}" if slug else f"{index:03d}"


def _section(cfg: DictConfig, key: str) -> dict[str, Any]:
    node = OmegaConf.select(cfg, key)
    return OmegaConf.to_container(node, resolve=True) if node is not None else {}


def trainer_gpus_per_node(cfg: DictConfig) -> int:
    """GPUs per node left to the trainer once sidecars with ``placement: dedicated`` took theirs."""
    node = cfg.get("sidecars")
    sidecars = OmegaConf.to_container(node, resolve=True) if node else {}
    dedicated = sum(int(s.get("gpus") or 0) for s in sidecars.values() if s.get("placement") == "dedicated")
    return int(cfg.cluster.gpus_per_node) - dedicated


def _typed_sections(cfg: DictConfig, point: str, kit_overrides: list[str]) -> tuple[dict[str, Any], list[str]]:
    """``cluster``, ``runtime`` and ``sidecars`` of ``cfg``, typed; the deprecation notices.

    A deprecated key set in a YAML file is moved to its new name unless the command line typed
    the new name. Raises SweepValidationError (point, key, fix) for a sidecar key SidecarConf does
    not have or a value of the wrong type.
    """
    from grpokit.config.schema import DEPRECATED

    cluster = _section(cfg, "cluster")
    typed = {item.lstrip("+").partition("=")[0] for item in kit_overrides}
    for old, new in DEPRECATED.items():
        if new in typed:
            cluster.pop(old.partition(".")[2], None)  # the command line's new name wins
    notices = section_notices(cluster, "cluster")
    sidecars, problems = {}, []
    for name, value in _section(cfg, "sidecars").items():
        try:
            sidecars[name] = sidecar_settings(name, value)
        except ValueError as exc:
            key, _, message = str(exc).partition(": ")
            fix = message.partition("; ")[2] or f"see grpokit.config.schema.SidecarConf for {key}"
            problems.append(Problem(point, key, message.partition("; ")[0], fix))
    if problems:
        raise SweepValidationError(problems)
    sections = {
        "cluster": ClusterConf.of(cluster),
        "runtime": RuntimeConf.of(_section(cfg, "runtime")),
        "sidecars": sidecars,
    }
    return sections, notices


def hardware_request(cluster: ClusterConf, hardware: dict[str, Any]) -> tuple[ClusterConf, str | None]:
    """The point's Slurm request for the GPUs its hardware profile was sized for.

    With ``cluster.kind: slurm``, no ``cluster.constraint`` of its own and the profile's name in
    ``cluster.gpu_constraints``, the request asks for those node features (``--constraint``); the
    notice says so. Otherwise ``cluster`` is returned as it is (notice None).
    """
    profile = str(hardware.get("name") or "")
    features = (cluster.gpu_constraints or {}).get(profile)
    if cluster.kind != "slurm" or cluster.constraint or not features:
        return cluster, None
    notice = (
        f"hardware={profile} (sized for {hardware.get('gpu_memory_gb', '?')} GB GPUs) asks Slurm for nodes "
        f"with --constraint={features} (cluster.gpu_constraints.{profile})"
    )
    return dataclasses.replace(cluster, constraint=str(features)), notice


def _chain_steps(after: Any) -> tuple[str, ...]:
    """``after`` as chain steps; () when it is invalid (the chain's own check refuses it, naming the fix)."""
    from grpokit.config.schema import ChainConf

    if OmegaConf.is_config(after):
        after = OmegaConf.to_container(after, resolve=True)
    try:
        return ChainConf.steps_of(after)
    except ValueError:
        return ()


def _entry_runtime(runtime: RuntimeConf, entry: Entry, rehearse: bool) -> RuntimeConf:
    """``runtime`` running ``entry``: ``python -m <module> [--config-path <dir>] --config-name <name>``
    unless the command typed its own ``runtime.trainer_cmd`` (the job puts the recipe checkout first on
    the trainer's ``PYTHONPATH``: :func:`grpokit.runtime.processes.trainer.entry_environment`)."""
    cmd = list(runtime.trainer_cmd)
    if not rehearse and cmd == list(RuntimeConf().trainer_cmd):
        cmd = ["python", *entry.trainer_args()]
    return dataclasses.replace(runtime, trainer_cmd=cmd)


def build_point(
    cfg: DictConfig,
    *,
    index: int,
    kit_overrides: list[str],
    swept: dict[str, Any],
    run_dir: Path | None = None,
) -> PointSpec:
    """Build the spec of one point from its composed kit config.

    Args:
        cfg: the composed kit config (``configs/config.yaml`` plus this point's overrides).
        index: the point's number in the sweep.
        kit_overrides: the overrides that made the point (recorded in the manifest).
        swept: the swept keys' values for this point (names the run folder).
        run_dir: the run folder; default ``<logs_root>/<sweep_name>/<name>``.
    """
    name = point_name(index, swept)
    sweep_name = str(cfg.sweep_name)
    run_dir = Path(run_dir) if run_dir else Path(str(cfg.logs_root)) / sweep_name / name
    ckpt_root = cfg.get("checkpoint_root")
    checkpoint_dir = Path(str(ckpt_root)) / sweep_name / name if ckpt_root else run_dir / "checkpoints"
    typed = typed_verl_keys(kit_overrides)
    if "trainer.default_local_dir" in typed:  # honoured: the user's own checkpoint folder
        checkpoint_dir = Path(str(OmegaConf.select(cfg, "verl.trainer.default_local_dir")))
    derived = {
        "trainer.default_local_dir": str(checkpoint_dir),
        "trainer.project_name": sweep_name,
        "trainer.experiment_name": name,
        "trainer.nnodes": int(cfg.cluster.nodes),
        "trainer.n_gpus_per_node": trainer_gpus_per_node(cfg),
    }
    refuse_replaced(cfg, name, typed, derived)
    entry = Entry.of(_section(cfg, "verl_entry"))
    use(entry.ref)  # verl's overrides are the point's difference from this config's defaults
    sections, deprecations = _typed_sections(cfg, name, kit_overrides)
    if not entry.is_default():
        sections["runtime"] = _entry_runtime(sections["runtime"], entry, bool(cfg.get("rehearse")))
    hardware = _section(cfg, "hardware")
    sections["cluster"], gpu_notice = hardware_request(sections["cluster"], hardware)
    if cfg.get("rehearse"):  # grpokit.rehearsal: the stand-in trainer and answer server, on any node
        runtime = sections["runtime"]
        env = {**rehearsal_trainer_env(_chain_steps(cfg.get("after"))), **runtime.env}  # runtime.env.* typed wins
        config_args = entry.trainer_args()[2:]  # the recipe's / Megatron's config, composed by the stand-in too
        sections["runtime"] = dataclasses.replace(
            runtime, trainer_cmd=[*REHEARSAL_TRAINER_CMD, *config_args], needs_gpu=False, rehearsal=True, env=env
        )
        sections["sidecars"] = rehearsal_sidecars(sections["sidecars"])
    for key in ("trainer.project_name", "trainer.experiment_name"):
        if key in typed:  # honoured: the user's names for verl's loggers
            derived[key] = OmegaConf.select(cfg, f"verl.{key}")
    runtime_overrides = [f"{k}={format_value(v)}" for k, v in derived.items()]  # quoted as verl parses them
    runtime_keys = set(derived)
    try:
        emitted = [o for o in verl_overrides(cfg) if o.lstrip("+").split("=", 1)[0] not in runtime_keys]
    except OmegaConfBaseException as exc:
        raise_unresolvable(exc, name, kit_overrides)
    emitted, preset_notices = yield_presets(emitted, typed)
    # The kit always keeps verl's file logger (the point's metrics.jsonl), whatever trainer.logger says.
    loggers, logger_notice = with_file_logger(OmegaConf.select(cfg, "verl.trainer.logger"))
    logger_override = f"trainer.logger={format_value(loggers)}"
    emitted = [logger_override if o.split("=", 1)[0] == "trainer.logger" else o for o in emitted]
    if logger_override not in emitted:  # the point left verl's default, ["console", "wandb"]
        emitted.append(logger_override)
    return PointSpec(
        sweep_name=sweep_name,
        index=index,
        name=name,
        run_dir=str(run_dir.resolve()),
        checkpoint_dir=str(checkpoint_dir.resolve()),
        kit_overrides=list(kit_overrides),
        swept=dict(swept),
        verl_overrides=emitted + runtime_overrides,
        experiment=_section(cfg, "experiment"),
        model=_section(cfg, "model"),
        **sections,
        hardware=hardware,
        verl_entry={} if entry.is_default() else dataclasses.asdict(entry),
        notices=[
            *deprecations,
            *preset_notices,
            *([logger_notice] if logger_notice else []),
            *([gpu_notice] if gpu_notice else []),
        ],
    )

"""Typed settings of the kit's own config sections: the root keys (:class:`RootConf`: ``resume``,
``dry_run``, ``wait``, ...), ``cluster`` (the job's shape and Slurm request), ``runtime`` (the in-job
driver, with its ``pruning`` rules), ``sidecars`` (servers started next to the trainer), ``chain``
(the job chained after a point) and ``halving`` (successive halving).

Each section is a ``kw_only`` dataclass with a comment per field, which is the setting's help
(:func:`grpokit.config.field_help.field_help` reads it for ``--help`` and ``docs/settings.md``); the
one default of each setting lives here: the YAML files and the code name only what differs from it
(``tests/unit/test_one_default.py`` composes the config, compares every field and scans the code).
:func:`register` stores them in Hydra's ConfigStore and the kit's YAML files extend them (Hydra 1.3
"extending configs": ``configs/cluster/*.yaml`` start with ``defaults: [_schema]``,
``configs/config.yaml`` with ``_root_schema`` and ``runtime/_schema``), so a misspelt key in a YAML file or on the
command line (``cluster.partiton=gpu``) and a value of the wrong type (``cluster.nodes=two``) are
refused by Hydra at composition, on the key.

Names follow submitit and hydra-submitit-launcher's ``SlurmQueueConf`` where they mean the same
thing (``timeout_min``, ``signal_delay_s``, ``additional_parameters``, ``partition``, ``qos``,
``account``, ``constraint``, ``nodes``, ``gpus_per_node``, ``cpus_per_task``, ``mem_gb``,
``array_parallelism``, ``setup``). The kit's earlier names (:data:`DEPRECATED`) are accepted for
one release: the command line is rewritten with a one-line notice (:func:`rename_deprecated`),
a YAML file that uses one composes into the deprecated field and :meth:`ClusterConf.of` moves it
to the new one (the point's ``notices`` say so).

Checks that relate fields (the warning signal's lead against the time limit, ...) are
:meth:`ClusterConf.problems` / :meth:`RuntimeConf.problems`, one :class:`~grpokit.problems.Problem`
each, run for every point before anything is submitted.

``cluster`` and ``runtime`` are read by attribute only (``spec.cluster.nodes``); a mapping (a
point.json, a test) becomes one through :meth:`ClusterConf.of` / :meth:`RuntimeConf.of`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from grpokit.problems import Problem

#: The kit's earlier names: ``section.old`` -> ``section.new`` (accepted for one release).
DEPRECATED = {
    "cluster.time_min": "cluster.timeout_min",
    "cluster.signal_lead_s": "cluster.signal_delay_s",
    "cluster.additional_sbatch": "cluster.additional_parameters",
}

#: hydra-submitit-launcher's ``SlurmQueueConf`` keys that are not ``cluster.<same name>`` here:
#: what to set instead (``hydra.launcher.<name>`` is refused naming it).
LAUNCHER_ELSEWHERE = {
    "comment": "cluster.additional_parameters.comment",
    "exclude": "cluster.additional_parameters.exclude",
    "gres": "cluster.additional_parameters.gres (the kit asks for GPUs with cluster.gpus_per_node)",
    "cpus_per_gpu": "cluster.additional_parameters.cpus_per_gpu",
    "gpus_per_task": "cluster.gpus_per_node (one task per node)",
    "mem_per_gpu": "cluster.mem_gb (per node) or cluster.additional_parameters.mem_per_gpu",
    "mem_per_cpu": "cluster.mem_gb (per node) or cluster.additional_parameters.mem_per_cpu",
    "max_num_timeout": "runtime.max_timeout_requeues",
    "tasks_per_node": "nothing: the kit runs one task per node (Ray's head or worker)",
    "name": "sweep_name (the job name)",
    "submitit_folder": "logs_root (submitit's files go to <logs_root>/<sweep_name>/submitit)",
    "stderr_to_stdout": "nothing: the job's stderr always goes to its stdout file",
}

#: Cluster kinds: ``local`` runs points one after another on this machine, ``slurm`` submits them.
CLUSTER_KINDS = ("local", "slurm")
#: The smallest value of each ``cluster`` size (a null size is Slurm's / the machine's default).
CLUSTER_MINIMUM = {
    "nodes": 1,
    "gpus_per_node": 0,
    "cpus_per_task": 1,
    "mem_gb": 1,
    "timeout_min": 1,
    "array_parallelism": 1,
    "signal_delay_s": 0,
}
#: Seconds after the job's start the warning signal must come later than (the job's own start-up): a
#: ``cluster.signal_delay_s`` of at least ``timeout_min x 60 - MIN_SIGNAL_GAP_S`` is refused.
MIN_SIGNAL_GAP_S = 60


class _Section:
    """A settings dataclass: its field names and its construction from a mapping (:meth:`of`)."""

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def of(cls, value: Any):
        """An instance from an instance, a mapping or an OmegaConf node (deprecated names moved).

        Raises:
            ValueError: a key the section does not have (names it and the closest key).
        """
        if isinstance(value, cls):
            return value
        data = _plain(value)
        data, _ = _move_deprecated(cls._section, data)
        unknown = [k for k in data if k not in cls._names()]
        if unknown:
            raise ValueError(f"{cls._section}.{unknown[0]}: no such key; {_did_you_mean(cls, unknown[0])}")
        return cls(**data)


def _plain(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    from omegaconf import OmegaConf

    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    return dict(value)


def _did_you_mean(cls, key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, cls._names(), n=1, cutoff=0.6)
    return f"did you mean {cls._section}.{close[0]}?" if close else f"the keys are {', '.join(cls._names())}"


def _move_deprecated(section: str, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``data`` with the section's deprecated keys renamed (a set old value wins); the notices."""
    out, notices = dict(data), []
    for old, new in DEPRECATED.items():
        sec, _, old_leaf = old.partition(".")
        new_leaf = new.partition(".")[2]
        if sec != section or old_leaf not in out:
            continue
        value = out.pop(old_leaf)
        if value is not None:
            out[new_leaf] = value
            notices.append(deprecation_notice(old))
    return out, notices


def deprecation_notice(old: str) -> str:
    """The one line said when a deprecated key is used, e.g. for ``cluster.time_min``."""
    return f"{old} is deprecated and will be removed in the next release: use {DEPRECATED[old]} (submitit's name)"


def rename_deprecated(argv: list[str]) -> tuple[list[str], list[str]]:
    """The command line with deprecated kit keys renamed (``cluster.time_min=30`` ->
    ``cluster.timeout_min=30``, ``+``/``++``/``~`` prefixes and sub-keys kept); the notices, one per key."""
    out, notices = [], []
    for arg in argv:
        if "=" in arg and not arg.startswith("-"):
            key, sep, value = arg.partition("=")
            prefix = key[: len(key) - len(key.lstrip("+~"))]
            bare = key[len(prefix) :]
            for old, new in DEPRECATED.items():
                if bare == old or bare.startswith(old + "."):
                    arg = f"{prefix}{new}{bare[len(old) :]}{sep}{value}"
                    if deprecation_notice(old) not in notices:
                        notices.append(deprecation_notice(old))
                    break
        out.append(arg)
    return out, notices


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _problem(point: str, key: str, message: str, fix: str) -> Problem:
    return Problem(point, key, message, fix)


@dataclasses.dataclass(kw_only=True)
class ClusterConf(_Section):
    """``cluster.*``: where the points run and, with ``kind: slurm``, each job's Slurm request.

    Sizes are per node (as submitit's); the job array gets one task per point.
    """

    _section = "cluster"

    # local: one point after another on this machine; slurm: one submitit job array per sweep.
    kind: str = "local"
    # Slurm partition (sbatch --partition); null: the cluster's default partition.
    partition: str | None = None
    # Slurm account (sbatch --account); null: the user's default.
    account: str | None = None
    # Slurm QOS (sbatch --qos); null: the association's default.
    qos: str | None = None
    # Node features (sbatch --constraint), e.g. "h200|a100"; null: any node (or the point's
    # hardware profile's entry in gpu_constraints).
    constraint: str | None = None
    # Node features per hardware profile (a site's mapping), e.g. {h200: "h200|h100", consumer_24gb:
    # rtx4090}: a point of that profile asks for them (sbatch --constraint) unless cluster.constraint is
    # set, so a sweep over profiles sends each profile's points to its own GPUs.
    gpu_constraints: dict[str, str] = dataclasses.field(default_factory=dict)
    # Nodes per point (sbatch --nodes); verl's trainer.nnodes.
    nodes: int = 1
    # GPUs per node (sbatch --gpus-per-node); verl's trainer.n_gpus_per_node less dedicated sidecars' GPUs.
    gpus_per_node: int = 1
    # CPUs of the one task per node (sbatch --cpus-per-task), all given to Ray; null: 1 on Slurm,
    # every CPU of this machine with kind: local.
    cpus_per_task: int | None = None
    # Memory per node in GiB (sbatch --mem, Slurm's GB are 1024 MB); null: the partition's default.
    mem_gb: int | None = None
    # Time limit of one attempt in minutes (sbatch --time). A point that needs longer is requeued
    # and resumes from its last checkpoint.
    timeout_min: int = 60
    # Array tasks running at once (Slurm's %N); shared between the arrays of one sweep.
    array_parallelism: int = 16
    # Seconds before the time limit at which Slurm sends USR2 to the batch shell (sbatch
    # --signal=B:USR2@<s>): at least one training step plus one checkpoint save.
    signal_delay_s: int = 600
    # More sbatch options, without the dashes, e.g. {exclusive: true, reservation: myres}; the kit's
    # own --signal and --requeue win over these.
    additional_parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Shell lines the job runs before the point (module loads, environment activation).
    setup: list[str] = dataclasses.field(default_factory=list)
    # The Python the job runs (submitit's `python`), e.g. another virtual environment's or a
    # container's interpreter on the GPU nodes; null: the sweep command's own. Its packages are
    # asked before submission (grpokit.validate.job_environment) and each point's needs checked.
    python: str | None = None

    def problems(self, point: str) -> list:
        """What is wrong with this request on its own or between its fields (one Problem each)."""
        out = []
        if self.kind not in CLUSTER_KINDS:
            out.append(
                _problem(
                    point,
                    "cluster.kind",
                    f"{self.kind!r} is not one of {CLUSTER_KINDS}",
                    "cluster=local or cluster=slurm",
                )
            )
        for key, low in CLUSTER_MINIMUM.items():
            value = getattr(self, key)
            if value is not None and value < low:
                out.append(_problem(point, f"cluster.{key}", f"{value} is below {low}", f"set cluster.{key}>={low}"))
        limit_s = self.timeout_min * 60
        if self.kind == "slurm" and limit_s > 0 and self.signal_delay_s >= limit_s - MIN_SIGNAL_GAP_S:
            out.append(
                _problem(
                    point,
                    "cluster.signal_delay_s",
                    f"the warning signal would come {self.signal_delay_s} s before a {limit_s} s time limit, "
                    f"i.e. {warning_after_start(self.signal_delay_s, limit_s)}; it must come more than "
                    f"{MIN_SIGNAL_GAP_S} s after the start (the job's own start-up)",
                    f"raise cluster.timeout_min to {(self.signal_delay_s + MIN_SIGNAL_GAP_S) // 60 + 1} or more"
                    + (
                        f", or lower cluster.signal_delay_s below {limit_s - MIN_SIGNAL_GAP_S}"
                        if limit_s > MIN_SIGNAL_GAP_S
                        else ""
                    ),
                )
            )
        return out


def warning_after_start(delay_s: int, limit_s: int) -> str:
    """When Slurm's warning signal comes, sent ``delay_s`` before a ``limit_s`` time limit (seconds):
    ``"60 s after the job starts"``, or ``"as the job starts"`` when the delay is the limit or longer."""
    after = limit_s - delay_s
    return f"{after} s after the job starts" if after > 0 else "as the job starts (the delay is the limit or longer)"


@dataclasses.dataclass(kw_only=True)
class _ClusterSchema(ClusterConf):
    """The Hydra schema of ``cluster``: :class:`ClusterConf` plus the deprecated names (null unless set)."""

    # deprecated: cluster.timeout_min (submitit's name)
    time_min: int | None = None
    # deprecated: cluster.signal_delay_s (submitit's name)
    signal_lead_s: int | None = None
    # deprecated: cluster.additional_parameters (submitit's name)
    additional_sbatch: dict[str, Any] | None = None


#: The keys of :class:`ClusterConf` a workstation uses (``cluster=local``).
LOCAL_CLUSTER_KEYS = ("kind", "nodes", "gpus_per_node", "cpus_per_task")

#: The Hydra schema of ``cluster=local``: :class:`ClusterConf`'s fields :data:`LOCAL_CLUSTER_KEYS`, with
#: their defaults and help (a Slurm key such as ``cluster.mem_gb`` there is refused: "add cluster=slurm").
_LocalClusterSchema = dataclasses.make_dataclass(
    "_LocalClusterSchema",
    [
        (f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory, metadata=f.metadata))
        for f in dataclasses.fields(ClusterConf)
        if f.name in LOCAL_CLUSTER_KEYS
    ],
    namespace={"_help_from": ClusterConf},
    kw_only=True,
)
_LocalClusterSchema.__module__ = __name__


#: The trainer's environment unless ``runtime.env`` says otherwise: quiet tokenizers and Ray logs,
#: no usage reports, no hub (compute nodes are often offline; the kit reads models from disk).
TRAINER_ENV = {
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_DEDUP_LOGS": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

#: The rules that take a whole number of steps (>= 1) and the rules that cannot be null.
_WHOLE_RULES = ("nonfinite_steps", "reward_stuck_steps", "min_step")
_REQUIRED_RULES = ("reward_stuck_steps", "reward_stuck_tol", "min_step")


@dataclasses.dataclass(kw_only=True)
class PruningRules(_Section):
    """``runtime.pruning.*``: the rules that stop a running point on RL failure signs in its metrics
    (grpokit.runtime.processes.pruning has the table of what each reads). A null rule is off.

    Why non-finite values are on by default and the bounds are not: a NaN/inf loss or grad norm is
    never a healthy run (verl skips such an update and goes on, burning the allocation); a KL,
    entropy or reward bound depends on the task, the model and the algorithm, so only the user sets it.
    """

    _section = "runtime.pruning"

    # Steps in a row with NaN/inf in the actor's losses, KL, entropy or grad norm; null: off.
    nonfinite_steps: int | None = 1
    # actor/kl_loss (else actor/ppo_kl) above this; null: off.
    kl_max: float | None = None
    # actor/entropy below this; null: off.
    entropy_min: float | None = None
    # critic/score/mean within reward_stuck_tol of this value (the format-only reward) ...
    reward_stuck_at: float | None = None
    # ... for this many steps in a row.
    reward_stuck_steps: int = 10
    # How close to reward_stuck_at the reward counts as stuck.
    reward_stuck_tol: float = 1e-6
    # No rule applies before this step.
    min_step: int = 1

    @property
    def off(self) -> bool:
        """Every rule is off (nothing to watch)."""
        return self.nonfinite_steps is self.kl_max is self.entropy_min is self.reward_stuck_at is None

    @classmethod
    def from_runtime(cls, runtime: Any) -> PruningRules | None:
        """The rules of a point's ``runtime`` section (``runtime.pruning``, absent: the defaults);
        None when every rule is off (``runtime.pruning: null`` or each rule null).

        Raises:
            ValueError: one line naming ``runtime.pruning.<key>``, the value and the fix.
        """
        section = runtime.pruning if isinstance(runtime, RuntimeConf) else _plain(runtime).get("pruning", {})
        if section is None:
            return None
        if not isinstance(section, PruningRules | Mapping) and not _is_config(section):
            raise ValueError(f"runtime.pruning must be a mapping of rules or null, got {section!r}")
        data = dataclasses.asdict(section) if isinstance(section, PruningRules) else _plain(section)
        unknown = sorted(set(data) - set(cls._names()))
        if unknown:
            raise ValueError(f"runtime.pruning.{unknown[0]}: no such rule; the rules are {', '.join(cls._names())}")
        values: dict[str, Any] = {}
        for key, value in data.items():
            if value is None or value == "null":
                if key in _REQUIRED_RULES:
                    raise ValueError(f"runtime.pruning.{key} cannot be null; leave it out for its default")
                values[key] = None
                continue
            whole = key in _WHOLE_RULES
            if isinstance(value, bool) or not isinstance(value, int | float) or (whole and value != int(value)):
                kind = "a whole number of steps" if whole else "a number"
                raise ValueError(f"runtime.pruning.{key} must be {kind}, got {value!r}")
            if whole and value < 1:
                raise ValueError(f"runtime.pruning.{key} must be >= 1, got {value!r} (null turns a rule off)")
            values[key] = int(value) if whole else float(value)
        rules = cls(**values)
        return None if rules.off else rules


def _is_config(value: Any) -> bool:
    from omegaconf import OmegaConf

    return OmegaConf.is_config(value)


@dataclasses.dataclass(kw_only=True)
class HalvingConf(_Section):
    """``halving.*``: successive halving (grpokit.submit.halving), e.g. ``halving.rungs=[2,4]``.

    Every point trains to the first rung (steps), then a controller job ranks them by ``metric`` and
    resubmits the best ``keep`` fraction from their checkpoints to the next rung (the others end
    ``pruned``, saying why); after the last rung they train to ``verl.trainer.total_training_steps``.
    """

    _section = "halving"

    # Steps at which the points are ranked, increasing; null: halving off.
    rungs: list[int] | None = None
    # Fraction of the points kept at each rung (at least one is kept).
    keep: float = 0.5
    # val_acc: the first val-core/<data_source>/acc/mean@1; or any verl metric, e.g. critic/score/mean.
    metric: str = "val_acc"
    # max: higher is better; min: lower is better.
    mode: str = "max"


@dataclasses.dataclass(kw_only=True)
class RuntimeConf(_Section):
    """``runtime.*``: how the in-job driver runs a point (grpokit.runtime.driver)."""

    _section = "runtime"

    # The trainer: verl's own entry point (a first word "python" is the job's interpreter). Tests
    # replace it with a test double of verl's trainer.
    trainer_cmd: list[str] = dataclasses.field(default_factory=lambda: ["python", "-m", "verl.trainer.main_ppo"])
    # verl cannot train without a CUDA GPU: on a machine without one the job runs every other stage
    # and ends in state `skipped_no_gpu`.
    needs_gpu: bool = True
    # Seconds to wait for Ray (all nodes and their GPUs) before failing the job.
    ray_start_timeout_s: float = 180
    # Seconds a stopped process gets between SIGTERM and SIGKILL (after Slurm's own SIGTERM, less:
    # every stop fits into Slurm's KillWait, grpokit.runtime.decisions.stop_decision.sigterm_grace).
    kill_grace_s: float = 15
    # Time-limit (and hang) requeues allowed per point since its last resubmission; preemptions are
    # not bounded.
    max_timeout_requeues: int = 3
    # Automatic retries of a crashed point (its trainer exited non-zero by itself; time-outs and
    # preemptions requeue by their own rules) since its last resubmission (grpokit.runtime.decisions.retry):
    # each retry runs on other nodes than the crashes before it (Slurm's ExcNodeList) after
    # retry_backoff_s x 2^k seconds; the same crash (first error's class) twice on different nodes
    # stops retrying. 1: a crash on a bad node (GPU, NCCL) is retried once elsewhere for one
    # start-up's cost; a bug crashes again at once and stops there. 0: no retry.
    max_retries: int = 1
    # Seconds before the first retry, doubled for each retry already made.
    retry_backoff_s: float = 60
    # Seconds given to the trainer to finish its step and write a checkpoint after a stop request.
    save_deadline_s: float = 900
    # Seconds between the driver's heartbeats (<run>/heartbeat.json's mtime): an attempt whose job
    # Slurm no longer knows and whose heartbeat is 6 beats (at least 10 s) old is decided from
    # evidence (grpokit.run_folder.liveness).
    heartbeat_s: float = 30
    # No-progress watchdog (grpokit.runtime.processes.watchdog; a trainer alive but writing no new step,
    # verl#4709): past max(hang_floor_s, hang_step_multiple x the longest step time of the attempt)
    # without a new step in metrics.jsonl (hang_startup_s before the first step) the stacks of the
    # trainer's processes go to attempts/<k>/hang_stacks.txt, the trainer is stopped and the point
    # requeued (hangs share max_timeout_requeues with time-outs) or failed as `hung`. null or 0: off.
    hang_floor_s: float | None = 1800
    # The watchdog's limit in multiples of the attempt's longest step time (when above hang_floor_s).
    hang_step_multiple: float = 5
    # Seconds the watchdog allows before the first step (start-up, loading, first rollout).
    hang_startup_s: float = 3600
    # Ray's object store on each node: this fraction of the job's memory there (Slurm's --mem, i.e.
    # cluster.mem_gb, or the job's cgroup limit), within Ray's bounds; null: Ray's own 0.3 of the
    # whole node's memory.
    ray_object_store_fraction: float | None = 0.3
    # Ports for Ray's worker processes on each node; null: 3 per CPU given to Ray (200 to 4000).
    ray_worker_ports: int | None = None
    # W&B, when verl.trainer.logger names wandb (grpokit.runtime.trackers): every attempt of a point
    # writes one run (id from sweep + point, grouped by sweep, tagged with the swept values), files
    # in <run>/wandb/. online | offline (compute nodes without internet; upload later with
    # `wandb sync <run>/wandb/offline-run-*`) | disabled; null: $WANDB_MODE of the submitting
    # shell, else online. Without wandb among the loggers W&B is disabled.
    wandb_mode: str | None = None
    # Rules that stop a point on RL failure signs in its metrics (PruningRules,
    # grpokit.runtime.processes.pruning); null: every rule off.
    pruning: PruningRules | None = dataclasses.field(default_factory=lambda: PruningRules())
    # Extra environment for the trainer and Ray workers (exported before Ray starts). A key set on
    # the command line is added to these (runtime.env.NAME=value); runtime.env={} drops them.
    env: dict[str, str] = dataclasses.field(default_factory=lambda: dict(TRAINER_ENV))

    # Set by rehearse=true (grpokit.rehearsal): the trainer is the kit's stand-in, its metrics are
    # made up; status.json, the manifest, status and report say `rehearsal`.
    rehearsal: bool = False

    def __post_init__(self) -> None:
        if self.pruning is not None and not isinstance(self.pruning, PruningRules):
            self.pruning = PruningRules.of(self.pruning)

    def problems(self, point: str) -> list:
        """Values the job could not use (one Problem each; the watchdog's and Ray's sizing keys)."""
        out = []
        for key in ("hang_floor_s", "hang_step_multiple", "hang_startup_s"):
            value = getattr(self, key)
            if value is None:
                continue  # hang_floor_s: null turns the watchdog off
            number = value if _is_number(value) else None
            if number is None or number < 0 or (number == 0 and key != "hang_floor_s"):
                out.append(
                    _problem(
                        point,
                        f"runtime.{key}",
                        f"must be a positive number, got {value!r}",
                        "set a number > 0 (seconds, or a multiple of the step time); runtime.hang_floor_s=null "
                        "turns the no-progress watchdog off",
                    )
                )
        fraction = self.ray_object_store_fraction
        if fraction is not None and not (_is_number(fraction) and 0 < fraction <= 1):
            out.append(
                _problem(
                    point,
                    "runtime.ray_object_store_fraction",
                    f"must be a fraction of the job's memory in (0, 1], got {fraction!r}",
                    "e.g. 0.3 (Ray's own default fraction)",
                )
            )
        ports = self.ray_worker_ports
        if ports is not None and not (isinstance(ports, int) and not isinstance(ports, bool) and ports >= 10):
            out.append(
                _problem(
                    point,
                    "runtime.ray_worker_ports",
                    f"must be a whole number of ports >= 10, got {ports!r}",
                    "null sizes it from the job's CPUs (3 per CPU, 200 to 4000)",
                )
            )
        if not isinstance(self.max_timeout_requeues, int) or self.max_timeout_requeues < 0:
            out.append(
                _problem(
                    point,
                    "runtime.max_timeout_requeues",
                    f"{self.max_timeout_requeues} is negative",
                    "set runtime.max_timeout_requeues >= 0 (0: a time-out fails the point)",
                )
            )
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            out.append(
                _problem(
                    point,
                    "runtime.max_retries",
                    f"{self.max_retries} is negative",
                    "set runtime.max_retries >= 0 (0: a crash fails the point)",
                )
            )
        for key in ("ray_start_timeout_s", "kill_grace_s", "save_deadline_s", "retry_backoff_s", "heartbeat_s"):
            if not _is_number(getattr(self, key)) or getattr(self, key) < 0:
                out.append(
                    _problem(point, f"runtime.{key}", f"{getattr(self, key)} is negative", f"set runtime.{key} >= 0")
                )
        return out


@dataclasses.dataclass(kw_only=True)
class VllmSettings:
    """``sidecars.<name>`` of ``kind: vllm``: ``vllm serve``'s flags of the same names (``-`` as ``_``);
    :class:`grpokit.serving.vllm.VllmServe` is these settings plus where it listens (and
    ``gpu_memory_utilization``, a key every sidecar has: :class:`SidecarConf`)."""

    # A Hugging Face folder or hub id (vllm serve's model argument).
    model: str | None = None
    # The name clients ask for.
    served_model_name: str | None = None
    dtype: str = "auto"
    # Tokens (prompt + answer).
    max_model_len: int = 2048
    # Sequences batched at once.
    max_num_seqs: int = 8
    enforce_eager: bool = False
    # More `vllm serve` arguments, as given.
    extra_args: list[str] = dataclasses.field(default_factory=list)


#: The kit's own sidecar kind; a task brings its own kinds (grpokit.config.task_registry).
BUILTIN_SIDECAR_KINDS: dict[str, type] = {"vllm": VllmSettings}


def sidecar_kind_settings() -> dict[str, type]:
    """Each sidecar kind's settings dataclass: ``vllm`` (:class:`VllmSettings`) and every task's kinds."""
    from grpokit.config.task_registry import sidecar_kinds

    return {**BUILTIN_SIDECAR_KINDS, **{name: kind.settings for name, kind in sidecar_kinds().items()}}


@dataclasses.dataclass(kw_only=True)
class SidecarConf(_Section):
    """``sidecars.<name>``: one server the job starts next to the trainer (grpokit.runtime.processes.sidecars).

    The keys every sidecar has are these fields; the kind's own keys (flat in the file, beside
    these) are the kind's settings dataclass in ``settings``: :class:`VllmSettings` for ``kind:
    vllm`` (``vllm serve``), a task's for a kind it brings (``memory_server``: the memory-RL task's
    memory server, grpokit.config.task_registry); any kind with a ``command`` runs that command
    instead (stand-ins in tests). ``spec.<key>`` reads a key of either part.
    """

    _section = "sidecars.<name>"

    # vllm | a task's kind (memory_server) | null (then `command` is required).
    kind: str | None = None
    # A command template instead of the kind's own ({python}, {host}, {port} are filled in; a first
    # word python is the job's interpreter).
    command: list[str] | None = None
    # Seconds to wait for the health check before failing the job.
    start_timeout_s: float = 600
    # The health check's path (HTTP 200 when ready).
    health_path: str = "/health"
    # GPUs of its own (with placement: dedicated, the node's last ones); 0: none.
    gpus: int = 0
    # shared: on the trainer's first GPU next to the rollout engine; dedicated: GPUs of its own.
    placement: str = "shared"
    # Fraction (0, 1] of each of its GPUs' total memory it takes: the GPU plan counts it (with
    # gpus > 0), and it is vllm serve's --gpu-memory-utilization for kind vllm.
    gpu_memory_utilization: float = 0.9
    # reward_kwargs handed to verl's reward function; "{url}" is the sidecar's address.
    reward_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The kind's own keys (an instance of its settings dataclass); None for a kind without one.
    settings: Any = None

    def __getattr__(self, name: str) -> Any:
        # only for names that are not the common fields: the kind's own keys (spec.model, spec.top_k)
        settings = self.__dict__.get("settings")
        if name.startswith("_") or settings is None or name not in {f.name for f in dataclasses.fields(settings)}:
            raise AttributeError(f"sidecars.<name> of kind {self.__dict__.get('kind')!r} has no key {name!r}")
        return getattr(settings, name)

    @classmethod
    def _common(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "settings")

    @classmethod
    def _names(cls, kind: str | None = "*") -> tuple[str, ...]:
        """The keys of ``sidecars.<name>`` of ``kind``: the common ones, then the kind's own (every
        kind's for ``"*"``, the default: a key the command line may name before the kind is known)."""
        kinds = sidecar_kind_settings()
        own = kinds.values() if kind == "*" else [kinds[kind]] if kind in kinds else []
        extra = [f.name for settings in own for f in dataclasses.fields(settings)]
        return tuple(dict.fromkeys([*cls._common(), *extra]))

    @classmethod
    def of(cls, value: Any) -> SidecarConf:
        """An instance from an instance or a flat mapping (a point.json's, a test's), the kind's own
        keys beside the common ones. Another kind's key is dropped: a point.json written before the
        split holds every kind's keys of each sidecar (with their defaults).

        Raises:
            ValueError: a key no kind has (names it and the closest key).
        """
        if isinstance(value, cls):
            return value
        data = _plain(value)
        known = set(cls._names(data.get("kind")))
        data = {k: v for k, v in data.items() if k in known or k not in cls._names()}
        return _split_sidecar(data, lambda part, settings_cls: part)

    def flat(self) -> dict[str, Any]:
        """The settings as the file has them: the common keys and the kind's own, one mapping."""
        data = {k: getattr(self, k) for k in self._common()}
        own = dataclasses.asdict(self.settings) if self.settings is not None else {}
        return {**data, **own}


def _split_sidecar(data: dict[str, Any], typed) -> SidecarConf:
    """``SidecarConf`` of the flat ``data``: the common keys and the kind's settings, each part passed
    through ``typed(part, settings class)`` first (type checks); a key the kind lacks is refused."""
    kind = data.get("kind")
    allowed = SidecarConf._names(kind)
    unknown = [k for k in data if k not in allowed]
    if unknown:
        import difflib

        kinds = sidecar_kind_settings()
        owners = [k for k, cls in kinds.items() if unknown[0] in {f.name for f in dataclasses.fields(cls)}]
        close = difflib.get_close_matches(unknown[0], allowed, n=1, cutoff=0.6)
        if owners:
            hint = f"it is a key of kind {' / '.join(owners)}; this sidecar's kind is {kind}"
        elif close:
            hint = f"did you mean sidecars.<name>.{close[0]}?"
        else:
            hint = f"the keys of kind {kind} are {', '.join(allowed)}"
        raise ValueError(f"sidecars.<name>.{unknown[0]}: no such key; {hint}")
    settings_cls = sidecar_kind_settings().get(kind)
    common = typed({k: v for k, v in data.items() if k in SidecarConf._common()}, SidecarConf)
    own = {k: v for k, v in data.items() if k not in SidecarConf._common()}
    settings = settings_cls(**typed(own, settings_cls)) if settings_cls is not None else None
    return SidecarConf(**common, settings=settings)


#: The steps ``after=[...]`` may chain after a point, in the order they run (grpokit.submit.chain).
CHAIN_STEPS = ("merge", "eval")


@dataclasses.dataclass(kw_only=True)
class ChainConf(_Section):
    """``chain.*``: the job chained after each point by ``after=[merge,eval]`` (grpokit.submit.chain).

    It runs once the point's own job ended well (``--dependency=afterok``): ``merge`` turns the
    point's final checkpoint into ``<run>/hf`` (``grpokit merge``), ``eval`` compares the base and
    the merged model on the point's test file (``grpokit serve-eval``, vLLM: it needs a GPU).
    """

    _section = "chain"

    # Time limit of the chained job in minutes (sbatch --time).
    timeout_min: int = 60
    # GPUs of the chained job (sbatch --gpus-per-node); eval serves both models with vLLM on them.
    gpus_per_node: int = 1
    # CPUs of the chained job (sbatch --cpus-per-task).
    cpus_per_task: int = 4
    # Memory in GiB (sbatch --mem); null: the partition's default.
    mem_gb: int | None = None
    # Partition; null: the points' own (cluster.partition).
    partition: str | None = None
    # eval: the first N test rows only; null: every row.
    limit: int | None = None
    # eval: tokens per answer (greedy decoding).
    max_tokens: int = 1024
    # eval: a command template instead of `vllm serve` ({python}, {model}, {name}, {host}, {port} are
    # filled in; the key is in VLLM_API_KEY). null: vllm serve. Tests put an HTTP test double here.
    server_command: list[str] | None = None

    @staticmethod
    def steps_of(after: Any) -> tuple[str, ...]:
        """``after`` (a list, or ``merge,eval`` as one string) checked: known steps, ``eval`` only
        after ``merge``, each once; returned in run order.

        Raises:
            ValueError: one line naming the step and the fix (``did you mean eval?``).
        """
        import difflib

        if after in (None, "", "null"):
            return ()
        items = [after] if isinstance(after, str) else list(after)
        steps = [str(x).strip() for item in items for x in str(item).split(",") if str(x).strip()]
        for step in steps:
            if step not in CHAIN_STEPS:
                close = difflib.get_close_matches(step, CHAIN_STEPS, n=1, cutoff=0.5)
                hint = f"did you mean {close[0]}?" if close else f"the steps are {', '.join(CHAIN_STEPS)}"
                raise ValueError(f"after: {step!r} is not a step; {hint} (e.g. after=[merge,eval])")
        if len(set(steps)) != len(steps):
            raise ValueError(f"after=[{','.join(steps)}]: a step is named twice; e.g. after=[merge,eval]")
        if "eval" in steps and "merge" not in steps:
            raise ValueError("after=[eval]: eval serves the merged model <run>/hf; chain both: after=[merge,eval]")
        return tuple(s for s in CHAIN_STEPS if s in steps)


@dataclasses.dataclass(kw_only=True)
class RootConf:
    """The root keys of the kit's config (``configs/config.yaml``): the sweep command's own settings,
    stored as the schema ``_root_schema`` that ``configs/config.yaml`` extends, so ``resume=yes`` or
    ``dry_runn=true`` is refused at composition. The sections (``cluster``, ``runtime``, ``verl``, ...)
    are typed by their own schemas (or, ``verl``, by the installed verl's defaults)."""

    # The project folder (data/, models/, logs/): $GRPOKIT_HOME, else the checkout, else the working folder.
    repo_root: str = "${kit_repo_root:}"
    # Output root: <logs_root>/<sweep_name>/<NNN>_<point>/ run folders.
    logs_root: str = "${repo_root}/logs"
    # The sweep folder's name. The default never collides: a second sweep started in the same second
    # gets <name>-2. An explicit name that already holds a submitted sweep is refused unless resume=true.
    sweep_name: str = "${experiment.name}_${now:%Y%m%d-%H%M%S}"
    # Re-use the existing sweep folder <sweep_name>: refused (naming point, key, old -> new) when any
    # point's training settings differ from those recorded there; otherwise resubmits only the points
    # that are not completed, queued or running, into their run folders (they resume from checkpoints).
    resume: bool = False
    # Checkpoints go to <checkpoint_root>/<sweep_name>/<point>/ (linked from the run folder) when set;
    # clusters keep them on a scratch file system. null: inside the run folder. It must be a file system
    # every node mounts: a job on several nodes checks that at start and stops (`invalid`) otherwise.
    checkpoint_root: str | None = None
    # Validate every point and write the verl command and Slurm request of each to
    # <sweep folder>/dry_run.md; submit nothing.
    dry_run: bool = False
    # Block until every point has reached a final state (the sweep command returns once queued otherwise).
    wait: bool = False
    # true: the jobs import the live code instead of the sweep's snapshot. A Slurm sweep copies the
    # kit's code into <sweep>/code/ at its first submission and every attempt of every point (requeues,
    # resume=true, resubmit.py) runs that copy, whatever is edited meanwhile (grpokit.submit.snapshot;
    # the manifest records the commit).
    use_live_code: bool = False
    # Rehearse the sweep on CPU nodes (grpokit.rehearsal): every point runs the whole Slurm path (arrays,
    # sidecars, Ray, checkpoints, requeues, resubmission, reports) with the kit's stand-in for verl's
    # trainer (steps, verl's metric names with made-up values, checkpoints, signals), no GPU needed;
    # results are marked `rehearsal` wherever they show. Shorten it with verl.trainer.total_training_steps.
    rehearse: bool = False
    # A verl launch script (python3 -m verl.trainer.main_ppo key=value ... ) whose overrides the points
    # start from (grpokit.config.verl_script): read without running it; no experiment preset or hardware
    # profile applies unless the command names one; the command's own keys win over the script's.
    verl_script: str | None = None
    # A recipe checkout (verl-recipe) where a script's own entry module is found (recipe.dapo.main_dapo ->
    # <recipe_root>/recipe/dapo/main_dapo.py); null: the script's folder and those above it, then here.
    recipe_root: str | None = None
    # The trainer the points run and the verl config they compose (grpokit.config.verl_entry.Entry:
    # module, config_name, config_dir, pythonpath, groups; {}: verl's main_ppo with ppo_trainer): set from a
    # verl_script's command (Megatron's ppo_megatron_trainer or model_engine=megatron, a recipe's entry and config
    # folder), not by hand.
    verl_entry: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Chained evaluation (grpokit.submit.chain), e.g. after=[merge,eval]: per point a job that starts once
    # the point's own job ended well (sbatch --dependency=afterok:<its task>), merges its final checkpoint
    # into <run>/hf (grpokit merge) and compares base and trained model on its test file (grpokit
    # serve-eval, vLLM: the job asks for chain.gpus_per_node GPUs); results in <run>/eval/ and report.py's
    # table. []: nothing chained. The chained job's own settings: chain.* (ChainConf).
    after: Any = dataclasses.field(default_factory=list)
    # Servers the job starts next to the trainer (experiment files declare them), by name (SidecarConf each).
    sidecars: dict[str, Any] = dataclasses.field(default_factory=dict)
    # verl's whole ppo_trainer config, verl's own names and defaults (the installed verl's).
    verl: Any = None
    # The model (config group model=): path, chat template, where it comes from.
    model: Any = None
    # The GPU profile (config group hardware=): micro batches, token caps, memory fractions.
    hardware: Any = None
    # The workload (config group experiment=): data, reward, its verl settings, its sidecars.
    experiment: Any = None
    # Where the points run and each job's Slurm request (ClusterConf; config group cluster=).
    cluster: Any = None
    # The in-job driver (RuntimeConf).
    runtime: Any = None
    # The job chained after each point by after=[merge,eval] (ChainConf).
    chain: Any = None
    # Successive halving (HalvingConf).
    halving: Any = None


#: The root keys that are the sweep command's settings (not sections).
ROOT_SETTINGS = tuple(
    f.name
    for f in dataclasses.fields(RootConf)
    if f.name not in ("verl", "model", "hardware", "experiment", "cluster", "runtime", "chain", "halving")
)


def register() -> None:
    """Store the schemas in Hydra's ConfigStore as ``_root_schema`` (the root keys), ``cluster/_schema``
    (``cluster/_local_schema`` for ``cluster=local``), ``runtime/_schema``, ``chain/_schema`` and
    ``halving/_schema``, extended by ``configs/cluster/*.yaml`` and ``configs/config.yaml``.

    ``sidecars`` has no Hydra schema: OmegaConf cannot add a new entry (``+sidecars.x={...}``) to
    a mapping of dataclasses; each sidecar goes through :func:`sidecar_settings` instead.
    """
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="_root_schema", node=RootConf, provider="grpokit")
    cs.store(group="cluster", name="_schema", node=_ClusterSchema, provider="grpokit")
    cs.store(group="cluster", name="_local_schema", node=_LocalClusterSchema, provider="grpokit")
    cs.store(group="runtime", name="_schema", node=RuntimeConf, provider="grpokit")
    cs.store(group="chain", name="_schema", node=ChainConf, provider="grpokit")
    cs.store(group="halving", name="_schema", node=HalvingConf, provider="grpokit")


def sidecar_settings(name: str, value: Any) -> SidecarConf:
    """``sidecars.<name>`` checked against :class:`SidecarConf` and its kind's settings, as one (their
    defaults for keys left out).

    Raises:
        ValueError: one line naming ``sidecars.<name>.<key>``: a key the kind does not have (with the
            closest one) or a value of the wrong type.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, ValidationError

    def typed(part: dict[str, Any], settings_cls: type) -> dict[str, Any]:
        try:
            merged = OmegaConf.merge(OmegaConf.structured(settings_cls), part)
        except (ConfigKeyError, ValidationError) as exc:
            key = getattr(exc, "full_key", "") or ""
            raise ValueError(f"sidecars.{name}.{key}: {str(exc).splitlines()[0]}") from None
        out = OmegaConf.to_container(merged, resolve=True)
        return {k: v for k, v in out.items() if k != "settings"}

    try:
        return _split_sidecar(_plain(value), typed)
    except ValueError as exc:
        raise ValueError(str(exc).replace("sidecars.<name>.", f"sidecars.{name}.")) from None


def section_notices(cfg_section: Mapping | None, section: str) -> list[str]:
    """The deprecation notices for ``section`` of a composed config (a YAML file used an old name)."""
    data = {k: v for k, v in (_plain(cfg_section) or {}).items() if v is not None}
    return _move_deprecated(section, data)[1]

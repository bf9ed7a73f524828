"""Every file name of a sweep folder and of a run folder: the one place that spells them.

docs/run-folder.md describes each file's format and writer. Code builds paths through
:class:`SweepFolder`, :class:`RunFolder` and :class:`AttemptFolder` (or the name constants
below), never from its own string literals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# --- sweep folder: logs/<sweep_name>/ ---
MANIFEST = "manifest.json"
SUBMISSIONS = "submissions.jsonl"
DRY_RUN = "dry_run.md"
SUBMITIT_DIR = "submitit"
HALVING = "halving.json"  # only with halving.rungs (grpokit.run_folder.halving_record)
CHAIN = "chain.json"  # only with after=[...]: the chained jobs (grpokit.submit.chain)
SLURM_SILENCE = "slurm_unanswered.json"  # since when Slurm has not answered status (run_folder.slurm_silence)

# --- run folder: logs/<sweep_name>/<NNN>_<slug>/ ---
POINT = "point.json"
VERL_CMD = "verl_cmd.sh"
ENV = "env.json"
ENDPOINTS = "endpoints.json"
GPU_PLAN = "gpu_plan.json"
STATUS = "status.json"
HEARTBEAT = "heartbeat.json"  # the driver's fixed-size liveness and outcome record (run_folder.heartbeat)
ATTEMPT_END = "attempt_end.json"  # an open attempt's end as a reader first decided it (run_folder.attempt_end)
METRICS = "metrics.jsonl"  # also each attempt's own file (verl's file logger)
ATTEMPTS_DIR = "attempts"
CHECKPOINTS = "checkpoints"
CONTROL_DIR = "control"
SAVE_REQUEST = "save_request"  # in control/
SAVED_FOR_REQUEUE = "saved_for_requeue.json"  # in control/
PRUNED = "pruned.json"  # in control/: a runtime.pruning verdict
RESUBMIT = "resubmit.json"
SECRETS_DIR = ".secrets"
HF_DIR = "hf"
CHAIN_STATUS = "chain_status.json"  # the chained job's own record (grpokit.evaluation.chained_job)
EVAL_DIR = "eval"  # serve-eval's results (grpokit.evaluation.compare)
EVAL_SUMMARY = "eval_summary.json"  # in eval/
EVAL_ANSWERS = "answers.jsonl"  # in eval/
EVAL_DISAGREEMENTS = "disagreements.jsonl"  # in eval/
EVAL_SERVERS_DIR = "servers"  # in eval/: the vLLM servers' logs

# --- attempt folder: <run folder>/attempts/<k>/ ---
DRIVER_LOG = "driver.log"
TRAINER_LOG = "trainer.log"
RAY_DIR = "ray"
SIDECARS_DIR = "sidecars"
SIGNAL_RELAY_LOG = "signal_relay.log"
TENSORBOARD_DIR = "tensorboard"
HANG_STACKS = "hang_stacks.txt"
STACKS_DIR = "stacks"
STARTUP = "startup.json"  # the start-up timeline (grpokit.runtime.startup)
STARTUP_ARRIVALS = "trainer.log.arrivals"  # when the trainer log grew, until the first step


@dataclass(frozen=True)
class _Folder:
    """A folder of the contract; ``path`` (str or Path) is kept as a Path. It need not exist yet."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))


@dataclass(frozen=True)
class SweepFolder(_Folder):
    """``logs/<sweep_name>/``."""

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def submissions(self) -> Path:
        return self.path / SUBMISSIONS

    @property
    def dry_run(self) -> Path:
        return self.path / DRY_RUN

    @property
    def submitit(self) -> Path:
        return self.path / SUBMITIT_DIR

    @property
    def halving(self) -> Path:
        return self.path / HALVING

    @property
    def chain(self) -> Path:
        return self.path / CHAIN

    @property
    def slurm_silence(self) -> Path:
        return self.path / SLURM_SILENCE


@dataclass(frozen=True)
class AttemptFolder(_Folder):
    """``<run folder>/attempts/<k>/``: one start of the job (k = 1, 2, ...)."""

    @property
    def number(self) -> int:
        return int(self.path.name)

    driver_log = property(lambda self: self.path / DRIVER_LOG)
    trainer_log = property(lambda self: self.path / TRAINER_LOG)
    ray = property(lambda self: self.path / RAY_DIR)
    sidecars = property(lambda self: self.path / SIDECARS_DIR)
    signal_relay_log = property(lambda self: self.path / SIGNAL_RELAY_LOG)
    metrics = property(lambda self: self.path / METRICS)
    tensorboard = property(lambda self: self.path / TENSORBOARD_DIR)
    hang_stacks = property(lambda self: self.path / HANG_STACKS)
    stacks = property(lambda self: self.path / STACKS_DIR)
    startup = property(lambda self: self.path / STARTUP)
    startup_arrivals = property(lambda self: self.path / STARTUP_ARRIVALS)


@dataclass(frozen=True)
class RunFolder(_Folder):
    """``logs/<sweep_name>/<NNN>_<slug>/``: one point's folder."""

    point = property(lambda self: self.path / POINT)
    verl_cmd = property(lambda self: self.path / VERL_CMD)
    env = property(lambda self: self.path / ENV)
    endpoints = property(lambda self: self.path / ENDPOINTS)
    gpu_plan = property(lambda self: self.path / GPU_PLAN)
    status = property(lambda self: self.path / STATUS)
    heartbeat = property(lambda self: self.path / HEARTBEAT)
    attempt_end = property(lambda self: self.path / ATTEMPT_END)
    metrics = property(lambda self: self.path / METRICS)
    attempts_dir = property(lambda self: self.path / ATTEMPTS_DIR)
    checkpoints = property(lambda self: self.path / CHECKPOINTS)
    control = property(lambda self: self.path / CONTROL_DIR)
    save_request = property(lambda self: self.path / CONTROL_DIR / SAVE_REQUEST)
    saved_for_requeue = property(lambda self: self.path / CONTROL_DIR / SAVED_FOR_REQUEUE)
    pruned = property(lambda self: self.path / CONTROL_DIR / PRUNED)
    resubmit = property(lambda self: self.path / RESUBMIT)
    secrets = property(lambda self: self.path / SECRETS_DIR)
    hf = property(lambda self: self.path / HF_DIR)
    chain_status = property(lambda self: self.path / CHAIN_STATUS)
    eval = property(lambda self: self.path / EVAL_DIR)
    eval_summary = property(lambda self: self.path / EVAL_DIR / EVAL_SUMMARY)

    def attempt(self, k: int) -> AttemptFolder:
        """The folder of attempt ``k`` (1-based)."""
        return AttemptFolder(self.path / ATTEMPTS_DIR / str(int(k)))

    def attempts(self) -> list[AttemptFolder]:
        """The attempt folders present, sorted by number (folders with a numeric name only)."""
        root = self.attempts_dir
        if not root.is_dir():
            return []
        return sorted(
            (AttemptFolder(p) for p in root.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda a: a.number
        )

"""Rule-based stopping of a running point on RL failure signs read from its metrics (``pruned``).

The rules read verl 0.9.1's file-logger rows (``{"step": N, "data": {key: float}}``, metric names
from ``verl/trainer/ppo/metric_utils.py`` and the actor's update): the point's merged series of
earlier attempts (``<run>/metrics.jsonl``) followed by the rows the running attempt appends. verl's
``FileLogger`` writes with ``orjson``, which writes NaN and +-inf as ``null``: a watched key present
with ``null`` (or a non-finite number) is a non-finite value.

==============================  =====================================================  ===========
setting (``runtime.pruning.``)  stops the point when                                    default
==============================  =====================================================  ===========
``nonfinite_steps``             ``actor/pg_loss``, ``actor/grad_norm``, ``actor/kl_loss``, 1
                                ``actor/ppo_kl`` or ``actor/entropy`` is NaN/inf for
                                this many steps in a row (null: off)
``kl_max``                      ``actor/kl_loss`` (KL to the reference; else              null (off)
                                ``actor/ppo_kl``) > ``kl_max``
``entropy_min``                 ``actor/entropy`` < ``entropy_min``                       null (off)
``reward_stuck_at``             ``critic/score/mean`` within ``reward_stuck_tol`` of this  null (off)
                                value for ``reward_stuck_steps`` steps in a row (the
                                format-only reward: the model learned the format, not
                                the task)
``min_step``                    no rule applies before this step                         1
==============================  =====================================================  ===========

Why non-finite values are on by default and the bounds are not: a NaN/inf loss or grad norm is
never a healthy run on any task (verl's engines skip the optimizer step of a non-finite grad norm
and go on, so the point would burn its allocation logging NaN); a KL, entropy or reward bound
depends on the task, the model and the algorithm, so only the user can set it.

A verdict makes the driver write the kit's save request (``control/save_request``): the trainer
checkpoints its last completed step at the next step boundary and stops, and the point ends
``pruned`` (a final state) with the verdict's reason; its checkpoints are kept.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from grpokit.config.schema import PruningRules  # the rules' settings and their one default each
from grpokit.run_folder.layout import PRUNED, AttemptFolder, RunFolder

log = logging.getLogger(__name__)

#: verl's metric names the rules read.
NONFINITE_KEYS = ("actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/ppo_kl", "actor/entropy")
KL_KEYS = ("actor/kl_loss", "actor/ppo_kl")  # the first one logged is used
ENTROPY_KEY = "actor/entropy"
REWARD_KEY = "critic/score/mean"
#: The file the driver's watcher writes its verdict to (``<run>/control/``), read back for the outcome.
VERDICT_FILE = PRUNED


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Why a point is stopped: the rule's setting name, the step it fired at, one line of reason."""

    rule: str
    step: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class RuleState:
    """The rules applied to rows in step order (streaming: :meth:`feed` one row at a time).

    A step seen again (a resumed attempt re-runs steps after its checkpoint) replaces nothing
    already counted: runs are counted over increasing steps only.
    """

    def __init__(self, rules: PruningRules):
        self.rules = rules
        self.last_step: int | None = None
        self.nonfinite_run = 0
        self.stuck_run = 0

    def feed(self, step: int, data: Mapping[str, Any]) -> Verdict | None:
        """Apply the rules to the row of ``step``; a :class:`Verdict` when one fires, else None."""
        if self.last_step is not None and step <= self.last_step:
            return None
        self.last_step = step
        r = self.rules
        bad = [k for k in NONFINITE_KEYS if k in data and not _finite(data[k])]
        self.nonfinite_run = self.nonfinite_run + 1 if bad else 0
        reward = data.get(REWARD_KEY)
        stuck = (
            r.reward_stuck_at is not None and _finite(reward) and abs(reward - r.reward_stuck_at) <= r.reward_stuck_tol
        )
        self.stuck_run = self.stuck_run + 1 if stuck else 0
        if step < r.min_step:
            return None
        if r.nonfinite_steps is not None and bad and self.nonfinite_run >= r.nonfinite_steps:
            shown = ", ".join(f"{k}={data[k] if data[k] is not None else 'NaN/inf'}" for k in bad)
            run = f" ({self.nonfinite_run} steps in a row)" if self.nonfinite_run > 1 else ""
            return Verdict(
                "nonfinite_steps",
                step,
                f"step {step}: non-finite {shown}{run} (runtime.pruning.nonfinite_steps={r.nonfinite_steps})",
            )
        if r.kl_max is not None:
            key = next((k for k in KL_KEYS if _finite(data.get(k))), None)
            if key is not None and data[key] > r.kl_max:
                return Verdict(
                    "kl_max", step, f"step {step}: {key}={data[key]:.4g} > runtime.pruning.kl_max={r.kl_max:g}"
                )
        if r.entropy_min is not None and _finite(data.get(ENTROPY_KEY)) and data[ENTROPY_KEY] < r.entropy_min:
            return Verdict(
                "entropy_min",
                step,
                f"step {step}: entropy collapsed, {ENTROPY_KEY}={data[ENTROPY_KEY]:.4g} < "
                f"runtime.pruning.entropy_min={r.entropy_min:g}",
            )
        if stuck and self.stuck_run >= r.reward_stuck_steps:
            return Verdict(
                "reward_stuck_at",
                step,
                f"step {step}: {REWARD_KEY} stuck at {reward:.4g} (runtime.pruning.reward_stuck_at="
                f"{r.reward_stuck_at:g}) for {self.stuck_run} steps (reward_stuck_steps={r.reward_stuck_steps})",
            )
        return None


def check(rules: PruningRules, rows: Iterable[Mapping[str, Any]]) -> Verdict | None:
    """The first verdict over file-logger rows ``{"step": N, "data": {...}}`` in order, or None."""
    state = RuleState(rules)
    for row in rows:
        verdict = state.feed(int(row["step"]), row.get("data") or {})
        if verdict is not None:
            return verdict
    return None


class MetricsTail:
    """New complete lines of a file-logger file, read incrementally (a partial last line waits)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset:  # reopened with "wb"
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        rows = []
        for line in lines:
            try:
                row = orjson.loads(line)
                rows.append({"step": int(row["step"]), "data": row.get("data") or {}})
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
        return rows


class PruneWatch:
    """The driver's watcher: a thread that applies the rules to the point's merged rows of earlier
    attempts, then to the rows the running attempt appends, every ``interval_s`` seconds, while
    ``alive()`` (the trainer runs).

    On a verdict it writes ``control/pruned.json`` (the verdict), calls ``request_stop`` (the
    driver's save request: the trainer checkpoints its last step and exits), and when the trainer
    is still alive ``deadline_s`` later calls ``force_stop``. :func:`recorded` reads the verdict back.
    """

    def __init__(
        self,
        rules: PruningRules,
        run_dir: Path,
        attempt_dir: Path,
        ctl: Path,
        *,
        request_stop: Callable[[Verdict], None],
        alive: Callable[[], bool],
        force_stop: Callable[[], None],
        deadline_s: float,
        interval_s: float = 1.0,
    ):
        self.state = RuleState(rules)
        self.ctl = Path(ctl)
        self.request_stop, self.alive, self.force_stop = request_stop, alive, force_stop
        self.deadline_s = deadline_s
        self.interval_s = interval_s
        self.verdict: Verdict | None = None
        self._earlier = RunFolder(run_dir).metrics
        self._tail = MetricsTail(AttemptFolder(attempt_dir).metrics)
        self._thread = threading.Thread(target=self._loop, name="prune-watch", daemon=True)
        (self.ctl / VERDICT_FILE).unlink(missing_ok=True)

    def start(self) -> PruneWatch:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def seed(self) -> None:
        """Feed the merged series of earlier attempts (runs of bad steps continue across requeues).
        A verdict already met there (the point was resubmitted after it) is not acted on again: the
        rules start afresh after those steps."""
        if not self._earlier.exists():
            return
        for row in MetricsTail(self._earlier).read():
            if self.state.feed(row["step"], row["data"]) is not None:
                self.state = RuleState(self.state.rules)
                self.state.last_step = row["step"]

    def poll(self) -> Verdict | None:
        """Apply the rules to rows not seen yet; the first verdict (written, acted on once) or None."""
        if self.verdict is not None:
            return self.verdict
        for row in self._tail.read():
            verdict = self.state.feed(row["step"], row["data"])
            if verdict is not None:
                from grpokit.run_folder.atomic import write_json_atomic

                self.verdict = verdict
                write_json_atomic(self.ctl / VERDICT_FILE, verdict.to_json())
                log.warning("pruning the point: %s", verdict.reason)
                self.request_stop(verdict)
                return verdict
        return None

    def _loop(self) -> None:
        try:
            self.seed()
            while self.alive():
                if self.poll() is not None:
                    break
                time.sleep(self.interval_s)
            if self.verdict is None:
                return
            end = time.monotonic() + self.deadline_s
            while self.alive() and time.monotonic() < end:
                time.sleep(0.5)
            if self.alive():
                log.warning("trainer did not stop %.0f s after the pruning save request: stopping it", self.deadline_s)
                self.force_stop()
        except Exception:  # the watcher must never take the driver down
            log.exception("pruning watcher error")


def start_watch(
    runtime: Mapping,
    run_dir: Path,
    attempt_dir: Path,
    ctl: Path,
    *,
    request_stop: Callable[[Verdict], None],
    alive: Callable[[], bool],
    force_stop: Callable[[], None],
) -> PruneWatch | None:
    """Start the watcher of a point's ``runtime.pruning`` rules (the save deadline is
    ``runtime.save_deadline_s``); None when every rule is off."""
    rules = PruningRules.from_runtime(runtime)
    if rules is None:
        (Path(ctl) / VERDICT_FILE).unlink(missing_ok=True)
        return None
    log.info("pruning rules: %s", rules)
    from grpokit.config.schema import RuntimeConf  # the one default of each key

    deadline = float(RuntimeConf.of(runtime).save_deadline_s)
    watch = PruneWatch(
        rules,
        run_dir,
        attempt_dir,
        ctl,
        request_stop=request_stop,
        alive=alive,
        force_stop=force_stop,
        deadline_s=deadline,
    )
    return watch.start()


def recorded(ctl: Path) -> Verdict | None:
    """The verdict this attempt's watcher wrote (``control/pruned.json``), or None."""
    try:
        return Verdict(**orjson.loads((Path(ctl) / VERDICT_FILE).read_bytes()))
    except (OSError, orjson.JSONDecodeError, TypeError):
        return None

"""An attempt the driver did not close, decided from evidence (issue 24).

A driver killed with SIGKILL (the OOM killer, a node agent), a node that died, or a full disk can
leave ``status.json`` ``running`` with its last attempt open. Readers (``status``, ``resubmit``,
``wait=true``) then decide the attempt with :func:`decide`, pure, from :class:`Evidence`:

==========================================================  ======================================
evidence                                                    verdict
==========================================================  ======================================
the driver's record holds this attempt's outcome            that outcome (status.json could not
(``heartbeat.json``, written in place on a full disk)       be rewritten)
Slurm holds the job queued or running                       none: Slurm's word stands
Slurm says the job ended (COMPLETED aside)                  final, the cause from submitit's
                                                            stderr, else Slurm's exit code/state
Slurm does not know the job, the heartbeat is stale         final, the cause from submitit's
                                                            stderr, else "no heartbeat for N s"
a reader already decided this attempt (``attempt_end.json``)  that verdict, the same reason (unless
                                                            Slurm holds the job queued or running)
Slurm does not know the job, heartbeat fresh or missing     none: nothing proves the driver gone
==========================================================  ======================================

The first final verdict decided from Slurm's answer or a stale heartbeat is recorded
(:mod:`grpokit.run_folder.attempt_end`, by :func:`settle`): once shown final, the point stays final
with the same reason when Slurm forgets the job, until a new attempt of it starts. Slurm's end
states are one table, :data:`grpokit.slurm.job_states.JOB_STATES` (their words, ``REVOKED`` is
``cancelled``, and the causes ``NODE_FAIL``, ``OUT_OF_MEMORY`` and ``BOOT_FAIL`` name by themselves);
a recorded outcome's word is :func:`grpokit.run_folder.states.ended_word`, as for ``status``.

The reason reads ``<cause> at step <S>; last checkpoint step <C>`` (``killed (signal 9) at step 16;
last checkpoint step 15``). A final verdict is one of the resubmittable words (``failed``,
``cancelled``, ``timeout``, ``preempted``): ``resubmit`` takes the point again and its next start
closes the open attempt with the same cause (:func:`killed_attempt_reason`).

Causes read in submitit's log files (``<sweep>/submitit/<job>_<task>_log.{out,err}``, Slurm's, srun's and
the batch shell's own lines;
submitit opens it in append mode, so each start of the job adds a run to it) by :func:`stderr_cause`.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grpokit.run_folder.atomic import now
from grpokit.run_folder.attempt_end import AttemptEnd, read_end, record_end
from grpokit.run_folder.heartbeat import Record, read_record
from grpokit.run_folder.layout import METRICS, RAY_DIR, SUBMITIT_DIR
from grpokit.run_folder.states import ended_word
from grpokit.slurm import log_lines
from grpokit.slurm.job_states import LIVE_WORDS, state_cause

if TYPE_CHECKING:
    from grpokit.run_folder.status_record import PointStatus
    from grpokit.run_folder.sweep_reader import Point
    from grpokit.slurm.job_states import SlurmJobState

#: verl's checkpoint tracker in the checkpoint folder (verl's ``latest_checkpointed_iteration.txt``).
TRACKER = "latest_checkpointed_iteration.txt"
#: submitit's line at each start of the job: it splits the stderr file into runs.
START_MARKER = "Starting with JobEnvironment"

# bash, the batch script's shell, on a child killed by a signal: "<script>: line 44: 24382 Killed   python ..."
_SHELL_SIGNAL = re.compile(r"line \d+: +\d+ (" + "|".join(log_lines.SIGNALS) + r")\b")
_LIVE = LIVE_WORDS


@dataclass(frozen=True)
class Cause:
    """What ended a run of the job: ``word`` (the point's state word it leads to), ``text``, and the
    ``ended_by`` an attempt it left open is closed with (``node_failed`` for a node failure)."""

    word: str
    text: str
    ended_by: str = "killed"


def stderr_cause(lines: list[str]) -> Cause | None:
    """The cause Slurm's own lines give for the end of one run (lines of one start of the job).

    Most specific first: a node failure (``srun: error: Node failure on node2``, ``... CANCELLED AT
    ... DUE TO NODE FAILURE``), Slurm's end of the job (``DUE TO PREEMPTION`` / ``TIME LIMIT`` /
    ``JOB REQUEUE``, or a plain ``CANCELLED AT``: ``scancel``), the OOM killer, a task killed by a
    signal (``srun: error: node1: task 0: Killed``, or the batch shell's ``slurm_script: line 44:
    24382 Killed  python ...`` -> signal 9), a task's exit code. None when the
    lines name none (format: Slurm 22.05's slurmstepd and srun messages).
    """
    if failed := node_failure(lines):
        return failed
    text = "\n".join(lines)
    if ends := log_lines.job_ends(text):
        end = ends[-1]
        if end.why == "preemption":
            return Cause("preempted", f"preempted by Slurm at {end.at}")
        if end.why == "time_limit":
            return Cause("timeout", f"time limit reached at {end.at}")
        if end.why == "requeue":
            return Cause("preempted", f"requeued by Slurm (scontrol requeue) at {end.at}")
        return Cause("cancelled", f"cancelled (scancel{' by ' + end.by if end.by else ''}) at {end.at}")
    if log_lines.oom_killed(text):
        return Cause("failed", "killed by the OOM killer (out of memory)")
    if signals := log_lines.task_signals(text):
        node, signal = signals[-1]
        return Cause("failed", f"killed (signal {signal}) on {node}")
    if m := list(_SHELL_SIGNAL.finditer(text)):
        return Cause("failed", f"killed (signal {log_lines.SIGNALS[m[-1].group(1)]})")
    if exits := log_lines.task_exits(text):
        node, code = exits[-1]
        return Cause("failed", f"exited with {code} on {node}")
    return None


def node_failure(lines: list[str]) -> Cause | None:
    """A node failure in Slurm's or srun's lines: ``srun: error: Node failure on node2`` (srun of a
    step on that node: the Ray worker's, in ``attempts/<k>/ray/ray_worker_<node>.log``) -> ``node
    node2 failed``; else slurmstepd's ``*** JOB 51 ON node1 CANCELLED AT ... DUE TO NODE FAILURE, SEE
    SLURMCTLD LOG FOR DETAILS ***`` (printed on the nodes that survived: ``node1`` is not the one
    that failed) -> ``a node of the job failed``. None when neither is there (Slurm 22.05's wording)."""
    text = "\n".join(lines)
    if nodes := log_lines.failed_nodes(text):
        return Cause("failed", f"node {nodes[0]} failed", "node_failed")
    for end in log_lines.job_ends(text):
        if end.why == "node_failure":
            text = f"a node of the job failed (Slurm cancelled it on {end.host} DUE TO NODE FAILURE)"
            return Cause("failed", text, "node_failed")
    return None


def srun_lines(attempt_dir: Path, max_bytes: int = 65536) -> list[str]:
    """The last ``max_bytes`` of each log in ``<attempt>/ray/`` (the Ray worker's srun writes its
    ``srun: error: Node failure on <node>`` there); [] when there are none."""
    lines: list[str] = []
    for path in sorted((Path(attempt_dir) / RAY_DIR).glob("*.log")):
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - max_bytes))
                lines += f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
    return lines


def run_cause(run: list[str], attempt_dir: Path | None) -> Cause | None:
    """The cause of one run's end: a node failure in the run's stderr or the attempt's Ray logs
    (:func:`node_failure`) first, else :func:`stderr_cause` of the run's stderr."""
    extra = srun_lines(attempt_dir) if attempt_dir is not None else []
    return node_failure(run + extra) or stderr_cause(run)


def split_runs(lines: list[str]) -> list[list[str]]:
    """The stderr file's lines cut into the job's starts (at submitit's :data:`START_MARKER`)."""
    runs: list[list[str]] = [[]]
    for line in lines:
        if START_MARKER in line and runs[-1]:
            runs.append([])
        runs[-1].append(line)
    return runs


def exit_code_cause(exit_code: str | None) -> Cause | None:
    """Slurm's ``ExitCode`` (``rc:signal``): ``0:9`` or ``137:0`` -> killed (signal 9); ``3:0`` -> exited 3."""
    if not exit_code or ":" not in exit_code:
        return None
    rc_text, sig_text = exit_code.split(":", 1)
    rc, sig = int(rc_text or 0) if rc_text.isdigit() else 0, int(sig_text) if sig_text.isdigit() else 0
    if sig:
        return Cause("failed", f"killed (signal {sig})")
    if rc > 128:
        return Cause("failed", f"killed (signal {rc - 128}, exit {rc})")
    if rc:
        return Cause("failed", f"exited with {rc}")
    return None


@dataclass(frozen=True)
class Evidence:
    """What is known of an open attempt.

    attempt: its number. job_id: the Slurm job that ran it (display id; None outside Slurm).
    slurm_state / slurm_word / slurm_exit_code / slurm_reason: Slurm's answer, its state name and
    the kit's word for it (``SlurmJobState.kit_state``); state None: Slurm does not know the job,
    or nobody asked. outcome: the driver's record's outcome for this attempt
    (``{"state", "ended_by", "reason"}``), None when it wrote none. beat_age_s / stale_after_s:
    seconds since the last heartbeat and the staleness limit (None: no heartbeat record).
    stderr: the cause in submitit's stderr for this run. last_step: the attempt's last logged step;
    checkpoint_step: verl's tracker in the checkpoint folder (None: absent or unreadable, e.g.
    emptied by a kill during its write); checkpoint_folders: ``global_step_*`` folders exist.
    settled: this attempt's end as a reader first decided it (``attempt_end.json``), None when none.
    last_beat_at: UTC ISO time of the driver's last heartbeat (None: no record of this attempt).
    """

    attempt: int
    job_id: str | None = None
    slurm_state: str | None = None
    slurm_word: str | None = None
    slurm_exit_code: str | None = None
    slurm_reason: str | None = None
    outcome: dict | None = None
    beat_age_s: float | None = None
    stale_after_s: float | None = None
    stderr: Cause | None = None
    last_step: int | None = None
    checkpoint_step: int | None = None
    checkpoint_folders: bool = False
    settled: AttemptEnd | None = None
    last_beat_at: str | None = None


@dataclass(frozen=True)
class Verdict:
    """The decided attempt: ``state`` (a point state word) and ``reason`` (one line); ``ended_by``
    the next start closes it with; ``slurm_state`` Slurm's end state (None: Slurm did not say);
    ``ended_at`` when the driver was last seen (UTC ISO time; None: unknown)."""

    state: str
    reason: str
    ended_by: str = field(default="killed", compare=False)
    slurm_state: str | None = field(default=None, compare=False)
    ended_at: str | None = field(default=None, compare=False)


def _where(ev: Evidence) -> str:
    step = f" at step {ev.last_step}" if ev.last_step is not None else " before its first step"
    if ev.checkpoint_step is not None:
        ckpt = f"last checkpoint step {ev.checkpoint_step}"
    else:
        ckpt = "checkpoint tracker unreadable" if ev.checkpoint_folders else "no checkpoint"
    return f"{step}; {ckpt}"


def _outcome_word(outcome: dict) -> str:
    """The word of the driver's recorded outcome (:func:`grpokit.run_folder.states.ended_word`)."""
    return ended_word(outcome.get("state"), outcome.get("ended_by"))


def _state_cause(slurm_state: str | None) -> Cause | None:
    """The cause Slurm's end state names by itself (:func:`grpokit.slurm.job_states.state_cause`)."""
    meaning = state_cause(slurm_state)
    if meaning is None or meaning.cause is None:
        return None
    return Cause(meaning.word, meaning.cause, "node_failed" if meaning.node_failed else "killed")


def decide(ev: Evidence) -> Verdict | None:
    """The verdict on an open attempt (the module's table); None when the evidence proves nothing
    (status.json's ``running`` and Slurm's live state stand)."""
    slurm_word = (ev.slurm_word or "unknown") if ev.slurm_state else None
    if ev.outcome is not None:
        if slurm_word in _LIVE and ev.outcome.get("state") == "requeued":
            return None  # the job requeued itself: Slurm holds it again
        return Verdict(_outcome_word(ev.outcome), str(ev.outcome.get("reason") or "").strip().split("\n")[0])
    if slurm_word in _LIVE:
        return None
    if ev.settled is not None:
        s = ev.settled
        return Verdict(s.state, s.reason, s.ended_by, s.slurm_state, s.end)
    if slurm_word is not None and slurm_word != "unknown":
        if slurm_word == "completed":
            return None  # exit 0 without an outcome: the status reports say what is missing
        cause = (
            ev.stderr
            or _state_cause(ev.slurm_state)
            or exit_code_cause(ev.slurm_exit_code)
            or Cause(slurm_word, f"Slurm: {ev.slurm_state}")
        )
        word = cause.word if cause.word != "failed" else slurm_word  # Slurm's word: JOB_STATES, one table
        reason = f"{cause.text}{_where(ev)} (job {ev.job_id}, Slurm: {ev.slurm_state})"
        return Verdict(word, reason, cause.ended_by, ev.slurm_state, ev.last_beat_at)
    if ev.beat_age_s is None or ev.stale_after_s is None or ev.beat_age_s <= ev.stale_after_s:
        return None
    gone = f"no heartbeat for {ev.beat_age_s:.0f} s" + (
        f" and Slurm no longer knows job {ev.job_id}" if ev.job_id else ", a run outside Slurm"
    )
    if ev.stderr is not None:
        cause = ev.stderr
        return Verdict(cause.word, f"{cause.text}{_where(ev)} ({gone})", cause.ended_by, None, ev.last_beat_at)
    return Verdict("failed", f"driver gone{_where(ev)} ({gone})", "killed", None, ev.last_beat_at)


# -- the evidence, read from the run folder ---------------------------------------------------------


def _tail_step(path: Path, max_bytes: int = 65536) -> int | None:
    """The ``step`` of the last complete JSON line of a ``metrics.jsonl`` (its last ``max_bytes``)."""
    import json

    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            step = json.loads(line).get("step")
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(step, int):
            return step
    return None


def checkpoint_step(run_dir: Path) -> int | None:
    """verl's tracker in ``<run>/checkpoints`` (the step of the last checkpoint it finished)."""
    try:
        text = (Path(run_dir) / "checkpoints" / TRACKER).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def has_step_folders(run_dir: Path) -> bool:
    """Whether ``<run>/checkpoints`` holds a ``global_step_*`` folder."""
    try:
        return any((Path(run_dir) / "checkpoints").glob("global_step_*"))
    except OSError:
        return False


def attempt_job_id(status: PointStatus | None) -> str | None:
    """The display id of the job that wrote ``status`` (``123_4`` in an array), from its ``slurm``."""
    return status.job_id if status is not None else None


def stderr_runs(sweep_dir: Path, job_id: str | None, max_bytes: int = 1 << 20) -> list[list[str]]:
    """submitit's output of ``job_id`` (``<sweep>/submitit/<job>_<task>_log.err`` and ``.out``: the
    kit's batch script sends the job's stderr to ``.out``) cut into runs; [] when there is none.
    Only the last ``max_bytes`` of each file are read: the ends of the last runs are there."""
    if not job_id:
        return []
    lines: list[str] = []
    for path in sorted((Path(sweep_dir) / SUBMITIT_DIR).glob(f"{job_id}_[0-9]*_log.*")):
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - max_bytes))
                lines += f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
    return split_runs(lines) if lines else []


def gather(point: Point, slurm: SlurmJobState | None, now_s: float | None = None) -> Evidence | None:
    """The evidence on the point's open attempt; None when its last attempt is closed (or none)."""
    attempts = point.attempts
    if not attempts or not attempts[-1].is_open:
        return None
    number = len(attempts)
    record = read_record(point.run_dir, now_s)
    if record is not None and record.fields.get("attempt") != number:
        record = None  # an earlier attempt's record: this one never wrote its own
    job_id = attempt_job_id(point.status) or point.job_id
    live = slurm is not None and slurm.kit_state in _LIVE
    needs_stderr = not live and (record is None or record.outcome is None)
    runs = stderr_runs(Path(point.run_dir).parent, job_id) if needs_stderr else []
    recorded_step = point.status.last_step if point.status is not None else None
    last = _tail_step(Path(point.run_dir) / "attempts" / str(number) / METRICS)
    settled = read_end(point.run_dir, number)
    return Evidence(
        attempt=number,
        job_id=job_id,
        slurm_state=slurm.state if slurm is not None and slurm.kit_state != "unknown" else None,
        slurm_word=slurm.kit_state if slurm is not None else None,
        slurm_exit_code=slurm.exit_code if slurm is not None else None,
        slurm_reason=slurm.reason if slurm is not None else None,
        outcome=record.outcome if record is not None else None,
        beat_age_s=record.age_s if record is not None else None,
        stale_after_s=record.stale_after_s if record is not None else None,
        stderr=run_cause(runs[-1] if runs else [], Path(point.run_dir) / "attempts" / str(number))
        if needs_stderr
        else None,
        last_step=last if last is not None else recorded_step,
        checkpoint_step=checkpoint_step(Path(point.run_dir)),
        checkpoint_folders=has_step_folders(Path(point.run_dir)),
        settled=settled,
        last_beat_at=_last_beat_at(record, now_s),
    )


def _last_beat_at(record: Record | None, now_s: float | None) -> str | None:
    """UTC ISO time of the record's last beat (its mtime), None without a record."""
    if record is None:
        return None
    at = (time.time() if now_s is None else now_s) - record.age_s
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="seconds")


def settle(point: Point, slurm: SlurmJobState | None) -> Verdict | None:
    """:func:`decide` on the point's open attempt (None: closed, or nothing proves it over). While
    Slurm holds the job only the record is read (its outcome is the one thing that decides then).
    A final verdict decided from Slurm's answer or a stale heartbeat is recorded once
    (:func:`grpokit.run_folder.attempt_end.record_end`): later reads show the same verdict."""
    if slurm is not None and slurm.kit_state in _LIVE:
        record = read_record(point.run_dir)
        if record is None or record.outcome is None:
            return None
    evidence = gather(point, slurm)
    verdict = decide(evidence) if evidence is not None else None
    if verdict is not None and evidence.outcome is None and evidence.settled is None:
        end = AttemptEnd(
            attempt=evidence.attempt,
            state=verdict.state,
            reason=verdict.reason,
            ended_by=verdict.ended_by,
            job_id=evidence.job_id,
            slurm_state=verdict.slurm_state,
            end=verdict.ended_at or now(),
        )
        record_end(point.run_dir, end)
        verdict = Verdict(end.state, end.reason, end.ended_by, end.slurm_state, end.end)
    return verdict


def killed_attempt_reason(run_dir: Path, status: PointStatus, previous_run: list[str] | None) -> tuple[str, str] | None:
    """``(ended_by, reason)`` of :func:`killed_attempt_end`; None when nothing says."""
    end = killed_attempt_end(run_dir, status, previous_run)
    return (end.ended_by, end.reason) if end is not None else None


def killed_attempt_end(run_dir: Path, status: PointStatus, previous_run: list[str] | None) -> AttemptEnd | None:
    """The end of the attempt a new start finds open: the record's outcome when the driver wrote
    one; else the end a reader recorded (``attempt_end.json``: Slurm's end state, e.g. ``FAILED``,
    and the driver's last beat); else the cause in the previous run's stderr (``previous_run``) or,
    for a node failure, the attempt's Ray logs (:func:`run_cause`), with the step and checkpoint,
    ending at the driver's last beat. None when nothing says. ``ended_by`` is ``node_failed`` for a
    node failure, else ``killed``."""
    attempts = status.attempts
    if not attempts or not attempts[-1].is_open:
        return None
    number = len(attempts)
    record = read_record(run_dir)
    if record is not None and record.fields.get("attempt") != number:
        record = None
    if record is not None and record.outcome is not None:
        outcome = record.outcome
        return AttemptEnd(
            number,
            str(outcome.get("state") or "failed"),
            str(outcome.get("reason") or ""),
            str(outcome.get("ended_by") or "failed"),
            end=record.fields.get("closed"),
        )
    if (settled := read_end(run_dir, number)) is not None:
        return settled
    cause = run_cause(previous_run or [], Path(run_dir) / "attempts" / str(number))
    if cause is None:
        return None
    ev = Evidence(
        attempt=number,
        last_step=_tail_step(Path(run_dir) / "attempts" / str(number) / METRICS),
        checkpoint_step=checkpoint_step(Path(run_dir)),
        checkpoint_folders=has_step_folders(Path(run_dir)),
    )
    return AttemptEnd(number, cause.word, f"{cause.text}{_where(ev)}", cause.ended_by, end=_last_beat_at(record, None))

"""Slurm's view of a list of jobs, from whichever client command answers.

Order: ``squeue`` (jobs slurmctld still holds, ``--states=all`` includes finished ones until
MinJobAge), then ``scontrol show job -o`` for ids squeue did not list, then ``sacct`` for the rest,
only when accounting works (it prints "Slurm accounting storage is disabled" otherwise). A missing
command, a non-zero exit or a timeout is logged and skipped; :func:`job_states` never raises for them.

Slurm not answering (slurmctld stopped or unreachable: squeue times out, or says "Unable to contact
slurm controller"): ``scontrol`` (the same controller) is not asked, and the answer's
:attr:`SlurmAnswer.unanswered` says what failed. With ``budget_s`` every command gets only what is
left of it (``status`` answers from the run folders within seconds).

Job ids are Slurm's display ids: ``"123"`` for a plain job, ``"123_4"`` for task 4 of array job 123
(what submitit returns and what ``squeue -r`` prints).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import time
from dataclasses import dataclass

from grpokit.slurm import runner
from grpokit.slurm.times import parse_time_s

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 20.0
#: What a client prints when slurmctld does not answer (Slurm 22.05's messages).
_NO_CONTROLLER = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|Zero Bytes were transmitted"
    r"|Communication connection failure",
    re.IGNORECASE,
)
_SEP = "|"


@dataclass(frozen=True)
class StateMeaning:
    """What one Slurm job state means to the kit: ``word`` (queued | running | completed | failed |
    timeout | preempted | cancelled), and for an end state that names its own cause (when the
    job's output does not), ``cause`` (one line) and ``node_failed`` (the attempt is closed with
    ``ended_by: node_failed``)."""

    word: str
    cause: str | None = None
    node_failed: bool = False


#: Every Slurm job state (squeue(1) "JOB STATE CODES", Slurm 22.05: 24 states) and its meaning: the
#: kit's one table of Slurm's states (``status``, ``report``, ``resubmit``, ``wait`` and the
#: open-attempt verdicts of :mod:`grpokit.run_folder.liveness` all read it). A state not listed
#: is ``unknown``.
JOB_STATES: dict[str, StateMeaning] = {
    "PENDING": StateMeaning("queued"),
    "CONFIGURING": StateMeaning("queued"),
    "REQUEUED": StateMeaning("queued"),
    "REQUEUE_HOLD": StateMeaning("queued"),
    "REQUEUE_FED": StateMeaning("queued"),
    "RESV_DEL_HOLD": StateMeaning("queued"),
    "SPECIAL_EXIT": StateMeaning("queued"),
    "RUNNING": StateMeaning("running"),
    "COMPLETING": StateMeaning("running"),
    "RESIZING": StateMeaning("running"),
    "SIGNALING": StateMeaning("running"),
    "STAGE_OUT": StateMeaning("running"),
    "SUSPENDED": StateMeaning("running"),
    "STOPPED": StateMeaning("running"),
    "COMPLETED": StateMeaning("completed"),
    "FAILED": StateMeaning("failed"),
    "NODE_FAIL": StateMeaning("failed", "a node of the job failed (Slurm: NODE_FAIL)", node_failed=True),
    "OUT_OF_MEMORY": StateMeaning("failed", "killed by the OOM killer (out of memory)"),
    "BOOT_FAIL": StateMeaning("failed", "a node of the job failed to boot (Slurm: BOOT_FAIL)", node_failed=True),
    "DEADLINE": StateMeaning("timeout"),
    "TIMEOUT": StateMeaning("timeout"),
    "PREEMPTED": StateMeaning("preempted"),
    "CANCELLED": StateMeaning("cancelled"),
    "REVOKED": StateMeaning("cancelled"),  # a federation sibling removed: the job ran elsewhere or not at all
}
#: Slurm's state -> the kit's word (:data:`JOB_STATES`' words, for readers that want only them).
KIT_STATE: dict[str, str] = {state: meaning.word for state, meaning in JOB_STATES.items()}
#: The kit's words for a job Slurm still holds (queued or running): Slurm's word stands for it.
LIVE_WORDS: tuple[str, ...] = ("queued", "running")


def kit_word(state: str | None) -> str:
    """The kit's word for Slurm's ``state`` (:data:`JOB_STATES`); ``unknown`` for None or a state
    Slurm's docs do not list. sacct's ``CANCELLED by 1000`` is read by its first word."""
    if not state:
        return "unknown"
    meaning = JOB_STATES.get(state.split()[0])
    return meaning.word if meaning is not None else "unknown"


def state_cause(state: str | None) -> StateMeaning | None:
    """:data:`JOB_STATES`' meaning of an end state that names its own cause (``NODE_FAIL``,
    ``OUT_OF_MEMORY``, ``BOOT_FAIL``); None for any other state."""
    meaning = JOB_STATES.get((state or "").split(" ")[0])
    return meaning if meaning is not None and meaning.cause is not None else None


@dataclass(frozen=True)
class SlurmJobState:
    """One job as Slurm reports it.

    job_id: display id (``123`` or ``123_4``). state: Slurm's state name (``RUNNING``, ``PENDING``,
    ``CANCELLED``, ...). source: the command that answered (squeue, scontrol, sacct).
    elapsed_s: run time in seconds so far (None when unknown). reason: Slurm's pending/exit reason.
    nodelist: allocated nodes. exit_code: ``"rc:signal"``. restarts: times requeued (scontrol only).
    """

    job_id: str
    state: str
    source: str
    elapsed_s: float | None = None
    reason: str | None = None
    nodelist: str | None = None
    exit_code: str | None = None
    restarts: int | None = None

    @property
    def kit_state(self) -> str:
        """queued | running | completed | failed | preempted | timeout | cancelled | unknown (:func:`kit_word`)."""
        return kit_word(self.state)

    @property
    def is_live(self) -> bool:
        """Whether Slurm still holds the job (queued or running, :data:`LIVE_WORDS`)."""
        return self.kit_state in LIVE_WORDS


def expand_array_ids(job_id: str) -> list[str]:
    """``"120_[1-3,7%2]"`` -> ``["120_1", "120_2", "120_3", "120_7"]``; other ids unchanged."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    base, spec = m.group(1), m.group(2).split("%", 1)[0]
    out: list[str] = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            step = 1
            if ":" in hi:
                hi, st = hi.split(":", 1)
                step = int(st)
            out.extend(f"{base}_{i}" for i in range(int(lo), int(hi) + 1, step))
        elif part:
            out.append(f"{base}_{int(part)}")
    return out


class SlurmAnswer(dict[str, SlurmJobState]):
    """:func:`job_states`'s answer: job id -> :class:`SlurmJobState`, and ``unanswered``: one line
    saying which client Slurm did not answer and how (``squeue: no answer within 3 s``), None when
    the controller answered (or no client is installed)."""

    unanswered: str | None = None


def _run(argv: list[str], timeout_s: float = COMMAND_TIMEOUT_S, silent: list[str] | None = None):
    """Run a Slurm client; None when it is missing or hangs. ``silent`` gets a line when the client
    got no answer from Slurm (it timed out, or printed a controller-contact error)."""
    if shutil.which(argv[0]) is None:
        log.debug("%s not on PATH; skipping", argv[0])
        return None
    try:
        res = runner.run(argv, timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        log.debug("%s did not answer within %.0f s", " ".join(argv[:3]), timeout_s)
        if silent is not None:
            silent.append(f"{argv[0]}: no answer within {timeout_s:.0f} s")
        return None
    except OSError as exc:
        log.warning("%s failed: %s", " ".join(argv[:3]), exc)
        return None
    if res.returncode != 0 and silent is not None and _NO_CONTROLLER.search(res.stderr or ""):
        silent.append(f"{argv[0]}: {(res.stderr or '').strip().splitlines()[-1]}")
    return res


SQUEUE_FORMAT = _SEP.join(["%i", "%T", "%M", "%r", "%N"])


def parse_squeue(text: str) -> dict[str, SlurmJobState]:
    """Parse ``squeue -h -r --states=all -o '%i|%T|%M|%r|%N'`` output."""
    out: dict[str, SlurmJobState] = {}
    for line in text.splitlines():
        fields = line.strip().split(_SEP)
        if len(fields) < 5:
            continue
        jid, state, elapsed, reason, nodes = fields[:5]
        for one in expand_array_ids(jid):
            out[one] = SlurmJobState(
                job_id=one,
                state=state.split()[0],
                source="squeue",
                elapsed_s=parse_time_s(elapsed),
                reason=None if reason in ("None", "") else reason,
                nodelist=nodes or None,
            )
    return out


def parse_scontrol(text: str) -> dict[str, SlurmJobState]:
    """Parse ``scontrol show job -o`` output (one ``Key=Value ...`` line per job)."""
    out: dict[str, SlurmJobState] = {}
    for line in text.splitlines():
        if "JobId=" not in line:
            continue
        # Values never hold spaces before the next "Key=" except Command/Comment-like free text,
        # which we do not read; a greedy split on spaces keeps the keys we need intact.
        kv = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if "ArrayJobId" in kv and "ArrayTaskId" in kv:
            ids = expand_array_ids(f"{kv['ArrayJobId']}_[{kv['ArrayTaskId']}]")
        else:
            ids = [kv["JobId"]]
        restarts = kv.get("Restarts")
        for one in ids:
            out[one] = SlurmJobState(
                job_id=one,
                state=kv.get("JobState", "UNKNOWN"),
                source="scontrol",
                elapsed_s=parse_time_s(kv.get("RunTime")),
                reason=None if kv.get("Reason") in (None, "None") else kv["Reason"],
                nodelist=kv.get("NodeList") or None,
                exit_code=kv.get("ExitCode"),
                restarts=int(restarts) if restarts and restarts.isdigit() else None,
            )
    return out


SACCT_FIELDS = "JobID,State,ElapsedRaw,ExitCode,NodeList,Reason"


def parse_sacct(text: str) -> dict[str, SlurmJobState]:
    """Parse ``sacct -X -n -P --format=JobID,State,ElapsedRaw,ExitCode,NodeList,Reason`` output.

    sacct lists one row per run of a requeued job; the last row (the current run) wins.
    """
    out: dict[str, SlurmJobState] = {}
    for line in text.splitlines():
        fields = line.strip().split(_SEP)
        if len(fields) < 6:
            continue
        jid, state, elapsed, exit_code, nodes, reason = fields[:6]
        for one in expand_array_ids(jid):
            out[one] = SlurmJobState(
                job_id=one,
                state=state.split()[0] if state else "UNKNOWN",
                source="sacct",
                elapsed_s=float(elapsed) if elapsed.isdigit() else None,
                reason=None if reason in ("None", "") else reason,
                nodelist=nodes or None,
                exit_code=exit_code or None,
            )
    return out


def _squeue(ids: list[str], timeout_s: float = COMMAND_TIMEOUT_S, silent: list[str] | None = None):
    res = _run(["squeue", "-h", "-r", "--states=all", "-j", ",".join(ids), "-o", SQUEUE_FORMAT], timeout_s, silent)
    if res is None:
        return {}
    if res.returncode != 0:
        # "Invalid job id specified" when none of the ids is known any more: not an error for us.
        log.debug("squeue rc=%d: %s", res.returncode, res.stderr.strip())
        return {}
    return parse_squeue(res.stdout)


def _scontrol(ids: list[str], timeout_s: float = COMMAND_TIMEOUT_S, silent: list[str] | None = None):
    # One call for all jobs slurmctld holds beats one call per id on a sweep of hundreds.
    res = _run(["scontrol", "show", "job", "-o"], timeout_s, silent)
    if res is None or res.returncode != 0:
        if res is not None:
            log.debug("scontrol rc=%d: %s", res.returncode, res.stderr.strip())
        return {}
    return parse_scontrol(res.stdout)


def _sacct(ids: list[str], timeout_s: float = COMMAND_TIMEOUT_S, silent: list[str] | None = None):
    res = _run(["sacct", "-X", "-n", "-P", f"--format={SACCT_FIELDS}", "-j", ",".join(ids)], timeout_s)
    if res is None:
        return {}
    if res.returncode != 0 or "accounting storage is disabled" in (res.stderr + res.stdout).lower():
        log.debug("sacct unusable (rc=%d): %s", res.returncode, res.stderr.strip())
        return {}
    return parse_sacct(res.stdout)


def job_states(job_ids: list[str], *, budget_s: float | None = None) -> SlurmAnswer:
    """Slurm's state of each job id that any client command knows; unknown ids are left out.

    job_ids: display ids (``"123"``, ``"123_4"``); empty/None entries are ignored.
    budget_s: seconds for all the clients together (each gets at most what is left, and
    :data:`COMMAND_TIMEOUT_S`); None: :data:`COMMAND_TIMEOUT_S` each.
    Never raises for a missing command, a failing command or disabled accounting; when slurmctld
    does not answer, ``scontrol`` is skipped and the answer's ``unanswered`` says so (sacct asks
    slurmdbd, which may still answer).
    """
    wanted = sorted({str(j) for j in job_ids if j})
    found = SlurmAnswer()
    silent: list[str] = []
    deadline = None if budget_s is None else time.monotonic() + budget_s
    for lookup in (_squeue, _scontrol, _sacct):
        rest = [j for j in wanted if j not in found]
        if not rest:
            break
        if silent and lookup is _scontrol:
            continue  # the controller squeue could not reach
        timeout_s = COMMAND_TIMEOUT_S
        if deadline is not None:
            timeout_s = min(timeout_s, deadline - time.monotonic())
            if timeout_s < 0.2:
                break
        answer = lookup(rest, timeout_s=timeout_s, silent=silent)
        found.update({j: answer[j] for j in rest if j in answer})
    found.unanswered = silent[0] if silent else None
    if silent and budget_s is None:  # a caller that shows no line of its own
        log.warning("Slurm did not answer (%s); going on without its view", silent[0])
    return found

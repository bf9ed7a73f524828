"""Slurm's answers about a stop signal, asked on a thread of the driver, never in the signal handler.

A stop signal's handler runs in the driver's main thread between two bytecodes, wherever that
thread was. The handler records only the signal and the clock (:meth:`StopInquiry.arrived`: two
assignments and an ``Event.set``); this module's thread, started when the handlers are installed,
then asks Slurm at once (``squeue`` for this task's own time left, ``scontrol`` for a preemption or
a requeue, :class:`grpokit.runtime.parts.Host`, each bounded by its own time-out) while the trainer
checkpoints, and completes the :class:`~grpokit.runtime.decisions.stop_decision.StopRequest`.

- Until Slurm answers, :meth:`StopInquiry.current` is the request with Slurm's answers unknown: its
  save deadline is the one :func:`~grpokit.runtime.decisions.stop_decision.save_budget_s` gives without a time
  left (never shorter than the final one), so a trainer that ignores the request is still stopped.
- :meth:`StopInquiry.complete` waits for the answers (at most :data:`ANSWER_WAIT_S`) before the stop
  decision uses them: what Slurm said right after the signal, not after the save.
- Slurm's KillWait is asked once, on a thread of its own started with the inquiry's
  (``host.kill_wait_s()``, before any signal): after a SIGTERM the save and each process stop fit into it
  (:func:`~grpokit.runtime.decisions.stop_decision.sigterm_grace`; Slurm's default 30 s until known).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from grpokit.runtime.decisions.stop_decision import StopRequest, TermGrace, save_budget_s, sigterm_grace
from grpokit.slurm.stop_view import SlurmStopView

log = logging.getLogger(__name__)

#: The longest :meth:`StopInquiry.complete` waits for Slurm's answers (s): squeue's and scontrol's
#: own time-outs (10 s each, :mod:`grpokit.slurm.time_left`, :mod:`grpokit.slurm.stop_view`) and slack.
ANSWER_WAIT_S = 25.0

#: The name of the inquiry's thread (tests check that none is left after the driver's close).
THREAD_NAME = "stop-inquiry"
#: The name of the thread that asks Slurm's KillWait (a daemon; it ends with scontrol's time-out).
KILL_WAIT_THREAD = "kill-wait"


class StopInquiry:
    """The first stop signal and Slurm's answers about it (see the module docstring).

    host: asked for ``time_left_s()``, ``stop_view()`` and ``task_id()`` (:class:`~grpokit.runtime.parts.Host`).
    save_deadline_s, grace_s: ``runtime.save_deadline_s`` and ``runtime.kill_grace_s`` (s), for
    :func:`~grpokit.runtime.decisions.stop_decision.save_budget_s`.
    """

    def __init__(self, host: Any, *, save_deadline_s: float, grace_s: float):
        self._host = host
        self._save_deadline_s = save_deadline_s
        self._grace_s = grace_s
        self.signum: int | None = None
        self.at: float | None = None
        self.request: StopRequest | None = None  # complete: Slurm answered (or could not)
        self._kill_wait_s: float | None = None  # Slurm's KillWait, once asked (None: unknown)
        self._arrived = threading.Event()
        self._answered = threading.Event()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)

    def start(self) -> StopInquiry:
        """Start the thread that waits for :meth:`arrived` (before the signal handlers are installed)
        and the one that asks Slurm's KillWait."""
        self._thread.start()
        ask = getattr(self._host, "kill_wait_s", None)
        if ask is not None:
            threading.Thread(target=self._ask_kill_wait, args=(ask,), name=KILL_WAIT_THREAD, daemon=True).start()
        return self

    def _ask_kill_wait(self, ask: Callable[[], float | None]) -> None:
        self._kill_wait_s = _ask(ask, None, "scontrol show config (KillWait)")

    def arrived(self, signum: int, at: float) -> None:
        """Called by the signal handler: record the signal and its clock reading; nothing blocks."""
        self.signum, self.at = signum, at
        self._arrived.set()

    def current(self) -> StopRequest | None:
        """The complete request once Slurm answered, else the one with Slurm's answers unknown
        (None before any signal)."""
        if self.request is not None or self.signum is None:
            return self.request
        return self._request(None, SlurmStopView(None, None))

    def complete(self, wait_s: float = ANSWER_WAIT_S) -> StopRequest | None:
        """The request with Slurm's answers, waiting at most ``wait_s`` for them (None before any
        signal). When they do not come in time, Slurm's answers count as unknown."""
        if self.signum is None:
            return None
        if not self._answered.wait(wait_s):
            log.warning("Slurm did not answer about the stop signal within %.0f s: counted as unknown", wait_s)
        return self.current()

    def close(self, wait_s: float = 1.0) -> None:
        """End the thread (after the stop decision); a thread still asking Slurm is a daemon."""
        self._arrived.set()
        if self._thread.is_alive():
            self._thread.join(wait_s)

    @property
    def term(self) -> TermGrace:
        """How the time after a SIGTERM is spent (KillWait as asked, else Slurm's default)."""
        in_slurm = bool(getattr(self._host, "in_slurm", lambda: False)())
        return sigterm_grace(self._kill_wait_s, kill_grace_s=self._grace_s, in_slurm=in_slurm)

    # -- the thread ------------------------------------------------------------------------------
    def _request(self, left: float | None, view: SlurmStopView) -> StopRequest:
        signum, term = self.signum, self.term
        return StopRequest(
            signum,
            at=self.at,
            save_budget_s=save_budget_s(
                signum, time_left_s=left, save_deadline_s=self._save_deadline_s, grace_s=self._grace_s, term=term
            ),
            time_left_s=left,
            slurm_requeues=view.requeueing,
            slurm_preempting=view.preempting,
            term=term,
        )

    def _run(self) -> None:
        self._arrived.wait()
        if self.signum is None:  # closed without a signal
            return
        name = signal.Signals(self.signum).name
        log.warning("%s received: asking the trainer to checkpoint at its next step boundary", name)
        # What Slurm says now (this task's own time left) is the stop decision's input, not what
        # it says after the save, which may take most of the lead.
        left = _ask(self._host.time_left_s, None, "squeue (time left)")
        view = _ask(self._host.stop_view, SlurmStopView(None, None), "scontrol (stop view)")
        self.request = request = self._request(left, view)
        self._answered.set()
        log.info(
            "Slurm task %s: own time left %s s, Slurm preempting it: %s, requeueing it: %s; save budget %.1f s "
            "(Slurm's KillWait %s s, each stop's grace %.2f s after SIGTERM)",
            self._host.task_id(),
            None if left is None else round(left),
            view.preempting,
            view.requeueing,
            request.save_budget_s,
            "unknown" if self._kill_wait_s is None else f"{self._kill_wait_s:.0f}",
            request.term.stop_s if request.term is not None else self._grace_s,
        )


def _ask(query: Callable[[], Any], unknown: Any, what: str) -> Any:
    try:
        return query()
    except Exception:
        log.exception("could not ask Slurm: %s; counted as unknown", what)
        return unknown

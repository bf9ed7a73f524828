"""verl imported on the other cores while Hydra composes the sweep: forked validator processes.

Importing verl (torch, tensordict, ray, transformers: about 7 s of CPU) is most of a sweep
command's fixed cost, and only verl's ``validate_config`` needs it; composing the kit's config
and building the points need none of it. :func:`start` forks the command's process before Hydra
runs; that child imports verl and composes verl's defaults, then forks the other workers (copies
with verl already imported, no second import; one worker per core, at most four), and all wait
for points.

The command hands each point over as soon as it is built (:func:`feed`; point ``i`` goes to
worker ``i mod workers``), so the workers validate early points while the command builds later
ones; :func:`take` ends the stream and collects the answers. Each worker runs exactly the checks
the command would run itself (:func:`grpokit.validate.check_stream`, the same code in a copy of
the same process) and sends back the problems of each of its points and whatever the checks
printed on stderr. Whenever an answer is missing (a worker died, a pickling failure, an error
inside a check, points that changed after they were fed) the command runs all the checks itself,
so a problem is never lost and an error surfaces as it would without the workers.

Message format on every pipe: an 8-byte big-endian length, then a pickle of that length.

Set ``GRPOKIT_VALIDATE_IN_PROCESS=1`` to validate in the command's own process.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import pickle
import queue
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_HEADER = struct.Struct("!Q")  # the length in bytes of the pickle that follows
_END = "end"  # the last message of a request: no more points

#: The running validator of this process (at most one; used once).
_current: _Validator | None = None
#: What a worker runs on the points it is sent (set by start(), before the fork).
_checks: Callable[[Iterable[Any]], Iterator[list]] | None = None


def _workers() -> int:
    """Validating processes: one per core this process may run on, at most four (on two cores the
    command builds points several times faster than verl checks them, so two workers pay)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


class _Writer(threading.Thread):
    """Pickles and writes the points of one worker in order, so that :func:`feed` never waits on a
    worker still importing verl (a pipe holds 64 KiB, a handful of points)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True, name="grpokit-validator-feed")
        self.fd, self.queue, self.failed = fd, queue.SimpleQueue(), False

    def run(self) -> None:
        while True:
            item = self.queue.get()
            if not self.failed:
                try:
                    _send(self.fd, item)
                except (OSError, pickle.PickleError, TypeError, AttributeError):
                    self.failed = True  # the worker is gone or the point does not pickle: no answer
            if isinstance(item, str) and item == _END:
                with contextlib.suppress(OSError):
                    os.close(self.fd)
                return


class _Validator:
    def __init__(self, pid: int, requests: list[int], replies: list[int]) -> None:
        self.pid, self.replies = pid, replies
        self.writers = [_Writer(fd) for fd in requests]
        for writer in self.writers:
            writer.start()
        self.fed: list[Any] = []

    def feed(self, spec: Any) -> None:
        self.writers[len(self.fed) % len(self.writers)].queue.put(spec)
        self.fed.append(spec)

    def end_requests(self) -> bool:
        """Every worker's stream is complete; False when one could not be written whole."""
        for writer in self.writers:
            writer.queue.put(_END)
        for writer in self.writers:
            writer.join()
        return not any(w.failed for w in self.writers)

    def close(self, answered: bool = False) -> None:
        """End the workers: killed, or when ``answered`` left to exit on their own (the first waits
        for the second, so that both count in this process's children's CPU time)."""
        if any(w.is_alive() for w in self.writers):  # not ended: end the streams, whatever they hold
            for writer in self.writers:
                writer.failed = True
                writer.queue.put(_END)
        for fd in self.replies:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.replies = []
        if not answered:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)  # the first worker, a child of this process, by its own id
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
        # the second worker (the first's child) reads end of stream or a closed reply pipe and exits


def start(checks: Callable[[Iterable[Any]], Iterator[list]]) -> bool:
    """Fork the validator, whose workers answer with ``checks(points)`` (the command's own
    :func:`grpokit.validate.check_stream`, handed down so this module imports nothing above it);
    False when not started (disabled, no fork, one is running already, or another thread is
    running: a fork copies the locks other threads hold, and a child that inherits a held lock hangs)."""
    global _current, _checks
    if _current is not None or os.environ.get("GRPOKIT_VALIDATE_IN_PROCESS") or not hasattr(os, "fork"):
        return False
    if threading.active_count() > 1:
        return False
    _checks = checks
    pipes = [(os.pipe(), os.pipe()) for _ in range(_workers())]  # per worker: (request, reply)
    sys.stdout.flush()
    sys.stderr.flush()
    # Ctrl-C is the command's to answer (grpokit.cli: one line, exit 130): the workers ignore
    # SIGINT, and it stays blocked across the fork, whose after-fork hooks would swallow it
    # ("Exception ignored in _releaseLock") in either process.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if pid == 0:  # the first worker: never returns into the command
        code = 0
        try:
            for (_, request_w), (reply_r, _) in pipes:
                os.close(request_w)
                os.close(reply_r)
            _first_worker([(request[0], reply[1]) for request, reply in pipes])
        except BaseException:  # noqa: BLE001 - the command validates itself when no answer comes
            code = 1
        finally:
            os._exit(code)
    for (request_r, _), (_, reply_w) in pipes:
        os.close(request_r)
        os.close(reply_w)
    _current = _Validator(pid, [request[1] for request, _ in pipes], [reply[0] for _, reply in pipes])
    atexit.register(stop)
    return True


def stop() -> None:
    """End the validator if it was not used (the command was refused or ended before validating)."""
    global _current
    validator, _current = _current, None
    if validator is not None:
        validator.close()


def feed(spec: Any) -> None:
    """Hand one built point to the validator (no-op without one); :func:`take` gets the answer.

    The points fed must be the very points later given to :func:`take`, in the same order."""
    if _current is not None:
        _current.feed(spec)


def take(specs: list) -> tuple[list, str] | None:
    """The validator's (problems, stderr text) for ``specs``; None when there is none or it could not answer.

    ``specs`` not fed yet are fed now. Points fed earlier must be ``specs`` themselves (the same
    objects, in order); otherwise None. The validator serves one request; later calls get None
    (the caller validates itself).
    """
    global _current
    validator, _current = _current, None
    if validator is None:
        return None
    answers = None
    try:
        if not validator.fed:
            for spec in specs:
                validator.feed(spec)
        same = len(validator.fed) == len(specs) and all(a is b for a, b in zip(validator.fed, specs, strict=True))
        if not same or not validator.end_requests():
            return None
        answers = [_receive(fd) for fd in validator.replies]
    except (OSError, EOFError, pickle.PickleError, struct.error, TypeError, AttributeError):
        answers = None
    finally:
        validator.close(answered=answers is not None)
    if answers is None:
        return None
    if not all(isinstance(a, tuple) and a[0] == "ok" for a in answers):
        return None
    per_worker = [a[1] for a in answers]
    if [len(p) for p in per_worker] != [len(specs[w :: len(answers)]) for w in range(len(answers))]:
        return None
    problems = [p for i in range(len(specs)) for p in per_worker[i % len(answers)][i // len(answers)]]
    printed = dict.fromkeys(line for a in answers for line in a[2].splitlines(keepends=True))  # a note once
    return problems, "".join(printed)


def _first_worker(channels: list[tuple[int, int]]) -> None:
    """Import verl and compose its defaults, fork the other workers (copies: no second import),
    then serve the first channel (and any channel no worker could be forked for, after it)."""
    from grpokit.config.verl_schema import lean_imports

    lean_imports()
    import verl.trainer.ppo.utils  # noqa: F401  (what run_validate_config imports)
    import verl.utils.config  # noqa: F401
    import verl.workers.config  # noqa: F401  (the dataclasses validate_config instantiates)

    from grpokit.config.overrides import flat_base
    from grpokit.config.verl_schema import verl_base
    from grpokit.validate import verl_verdicts

    verl_base()
    flat_base()
    verl_verdicts.store_key()  # the walk of verl's files, once for every worker
    served_here, forked = [channels[0]], []
    for request_r, reply_w in channels[1:]:
        try:  # a fork copies the locks other threads hold: only while this process has one thread
            pid = os.fork() if threading.active_count() == 1 else -1
        except OSError:
            pid = -1
        if pid == 0:
            code = 0
            try:
                for fd in (fd for channel in channels if channel != (request_r, reply_w) for fd in channel):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                _serve(request_r, reply_w)
            except BaseException:  # noqa: BLE001 - the command validates itself when no answer comes
                code = 1
            finally:
                os._exit(code)
        if pid < 0:  # no second worker: this one serves that channel too, after its own
            served_here.append((request_r, reply_w))
        else:
            forked.append(pid)
            os.close(request_r)
            os.close(reply_w)
    for channel in served_here:
        _serve(*channel)
    for pid in forked:  # its CPU time counts in this process's children's, hence in the command's
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)


def _serve(request_fd: int, reply_fd: int) -> None:
    check_stream = _checks
    assert check_stream is not None  # set by start() before the fork

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            per_spec = list(check_stream(_points(request_fd)))
        reply: tuple[Any, ...] = ("ok", per_spec, captured.getvalue())
    except EOFError:  # the command ended (or was refused) before the stream was complete
        return
    except BaseException:  # noqa: BLE001 - the command runs the checks again and meets the error itself
        reply = ("error",)
    _send(reply_fd, reply)


def _points(fd: int) -> Iterator[Any]:
    """The points of one request, in order, as they arrive; EOFError when the stream breaks off."""
    with os.fdopen(fd, "rb") as src:
        while True:
            item = _read_one(src)
            if isinstance(item, str) and item == _END:
                return
            yield item


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    with os.fdopen(os.dup(fd), "wb") as out:
        out.write(_HEADER.pack(len(data)) + data)


def _read_one(src) -> Any:
    head = src.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the other side closed the pipe")
    (size,) = _HEADER.unpack(head)
    data = src.read(size)
    if len(data) < size:
        raise EOFError("truncated message")
    return pickle.loads(data)


def _receive(fd: int) -> Any:
    with os.fdopen(os.dup(fd), "rb") as src:
        return _read_one(src)

"""verl imported on the second core while Hydra composes the sweep: a forked validator process.

Importing verl (torch, tensordict, ray, transformers) is most of a sweep command's fixed cost,
and only verl's ``validate_config`` needs it; composing the kit's config and building the points
need none of it. :func:`start` forks the command's process before Hydra runs; the child imports
verl and composes verl's defaults, then waits. :func:`grpokit.validate.validate_points` hands the
built points to it (:func:`take`), and the child runs exactly the checks the command would run
itself (:func:`grpokit.validate.check_each`, the same code in a copy of the same process) and
sends the problems back, with whatever the checks printed on stderr. Whenever the child cannot
answer (it died, a pickling failure, an error inside a check) the command runs the checks itself,
so a problem is never lost and an error surfaces as it would without the child.

Set ``GRPOKIT_VALIDATE_IN_PROCESS=1`` to validate in the command's own process.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import pickle
import signal
import struct
import sys
import threading
from typing import Any

_HEADER = struct.Struct("!Q")  # the length in bytes of the pickle that follows

#: The running validator of this process (at most one; used once).
_current: _Validator | None = None


class _Validator:
    def __init__(self, pid: int, request_fd: int, reply_fd: int) -> None:
        self.pid, self.request_fd, self.reply_fd = pid, request_fd, reply_fd

    def close_request(self) -> None:
        """The request is complete (the child reads to its end)."""
        if self.request_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.request_fd)
            self.request_fd = -1

    def close(self) -> None:
        self.close_request()
        if self.reply_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.reply_fd)
            self.reply_fd = -1
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)  # a child of this process, by its own id
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)


def start() -> bool:
    """Fork the validator; False when not started (disabled, no fork, one is running already,
    or another thread is running: a fork copies the locks other threads hold, and a child that
    inherits a held lock hangs)."""
    global _current
    if _current is not None or os.environ.get("GRPOKIT_VALIDATE_IN_PROCESS") or not hasattr(os, "fork"):
        return False
    if threading.active_count() > 1:
        return False
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the command
        os.close(request_w)
        os.close(reply_r)
        code = 0
        try:
            _serve(request_r, reply_w)
        except BaseException:  # noqa: BLE001 - the parent validates itself when no answer comes
            code = 1
        finally:
            os._exit(code)
    os.close(request_r)
    os.close(reply_w)
    _current = _Validator(pid, request_w, reply_r)
    atexit.register(stop)
    return True


def stop() -> None:
    """End the validator if it was not used (the command was refused or ended before validating)."""
    global _current
    validator, _current = _current, None
    if validator is not None:
        validator.close()


def take(specs: list) -> tuple[list, str] | None:
    """The validator's (problems, stderr text) for ``specs``; None when there is none or it could not answer.

    The validator serves one request; later calls get None (the caller validates itself).
    """
    global _current
    validator, _current = _current, None
    if validator is None:
        return None
    try:
        _send(validator.request_fd, specs)
        validator.close_request()
        reply = _receive(validator.reply_fd)
    except (OSError, EOFError, pickle.PickleError, struct.error, TypeError, AttributeError):
        reply = None
    finally:
        validator.close()
    if not isinstance(reply, tuple) or reply[0] != "ok":
        return None
    return reply[1], reply[2]


def _serve(request_fd: int, reply_fd: int) -> None:
    from grpokit.config.verl_schema import lean_imports

    lean_imports()
    import verl.trainer.ppo.utils  # noqa: F401  (what run_validate_config imports)
    import verl.utils.config  # noqa: F401

    from grpokit.config.overrides import flat_base
    from grpokit.config.verl_schema import verl_base
    from grpokit.validate import check_each

    verl_base()
    flat_base()
    try:
        specs = _receive(request_fd)
    except EOFError:  # the command ended (or was refused) before validating
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            problems = check_each(specs)
        reply: tuple[Any, ...] = ("ok", problems, captured.getvalue())
    except BaseException:  # noqa: BLE001 - the parent runs the checks again and meets the error itself
        reply = ("error",)
    _send(reply_fd, reply)


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    with os.fdopen(os.dup(fd), "wb") as out:
        out.write(_HEADER.pack(len(data)) + data)


def _receive(fd: int) -> Any:
    with os.fdopen(os.dup(fd), "rb") as src:
        head = src.read(_HEADER.size)
        if len(head) < _HEADER.size:
            raise EOFError("the other side closed the pipe")
        (size,) = _HEADER.unpack(head)
        data = src.read(size)
    if len(data) < size:
        raise EOFError("truncated message")
    return pickle.loads(data)

"""The driver's log of one attempt: its ``driver.log`` and stderr, every line once.

:class:`JobLog` installs two handlers on the root logger (idempotent: installing again, for the
same file or another, replaces them) and removes and closes them when the attempt is closed, so
that a second driver in the same process (tests, a local run after another) neither writes into
the first one's ``driver.log`` nor prints each line twice.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JobLog:
    """Root logging of one attempt: ``install(path)`` once the attempt folder exists, ``remove()`` at close."""

    def __init__(self) -> None:
        self._handlers: list[logging.Handler] = []

    @property
    def installed(self) -> bool:
        return bool(self._handlers)

    def install(self, path: Path) -> None:
        """Log INFO and above to ``path`` (its folder is made) and to stderr.

        A plain stream handler to stderr/stdout already on the root logger is removed (importing
        verl runs ``logging.basicConfig``), so each line appears once in the job's output file.
        """
        self.remove()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        root = logging.getLogger()
        root.setLevel(logging.INFO)
        for old in list(root.handlers):
            if type(old) is logging.StreamHandler and old.stream in (sys.stderr, sys.stdout):
                root.removeHandler(old)
        fmt = logging.Formatter(FORMAT)
        for handler in (logging.FileHandler(path), logging.StreamHandler(sys.stderr)):
            handler.setFormatter(fmt)
            root.addHandler(handler)
            self._handlers.append(handler)

    def remove(self) -> None:
        """Take this log's handlers off the root logger and close its file (no-op when not installed)."""
        root = logging.getLogger()
        for handler in self._handlers:
            root.removeHandler(handler)
            handler.close()
        self._handlers.clear()

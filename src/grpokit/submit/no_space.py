"""A full disk (ENOSPC, EDQUOT) while a command writes a sweep folder: one line, and what this
submission half-wrote undone (issue 36.2).

Every step of the sweep command that writes (the claim, the code snapshot, ``chain.json``, the
point folders, ``manifest.json``, ``submissions.jsonl``) and of a resubmission (``resubmit.json``
of each point, the manifest, the submission line) runs inside :func:`writing`, which turns a full
disk into :class:`NoSpace`: the folder, what was being written and about how many bytes it needs.
:class:`Undo` then removes what this submission wrote, never anything earlier: a new sweep's
folder (or, in a dry run's folder it took over, the entries it added; the dry run's manifest is
put back), a resubmission's ``resubmit.json`` files (the earlier ones put back) and its
``submissions.jsonl`` line. The sweep name is then free to use again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from grpokit.run_folder.claim import Claim
from grpokit.runtime.decisions.disk_full import FULL_ERRNOS

#: Bytes one small file or folder takes at least on a file system (a block).
BLOCK = 4096


def is_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is an ENOSPC/EDQUOT ``OSError``."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def human(n: int | None) -> str:
    """``1.2 MB``-style size of ``n`` bytes (``?`` when unknown)."""
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def free_bytes(folder: Path) -> int | None:
    """Free bytes for this user on the file system of ``folder`` (its nearest existing parent)."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


class NoSpace(Exception):
    """A write into ``folder`` failed for lack of space (ENOSPC) or quota (EDQUOT).

    Attributes:
        folder: the folder written to. what: what was being written (``the code snapshot``).
        needed: about how many bytes that write needs (None: unknown). free: free bytes there
        when it failed. errno: the ``OSError``'s errno.
    """

    def __init__(self, folder: Path, what: str, needed: int | None, free: int | None, errno: int):
        self.folder, self.what, self.needed, self.free, self.errno = Path(folder), what, needed, free, errno
        super().__init__(self.describe())

    def describe(self) -> str:
        """``disk full writing <what> into <folder> (about <n> needed, <m> free)``."""
        cause = "quota exceeded" if self.errno == FULL_ERRNOS[1] else "disk full"
        return (
            f"{cause} writing {self.what} into {self.folder} "
            f"(about {human(self.needed)} needed, {human(self.free)} free)"
        )


@contextlib.contextmanager
def writing(folder: Path, what: str, needed: int | None) -> Iterator[None]:
    """Within the block, an ENOSPC/EDQUOT ``OSError`` becomes :class:`NoSpace` (others pass as they are).

    Args:
        folder: the folder being written (named in the line).
        what: what is being written, for the line (``manifest.json``).
        needed: an estimate of the bytes the block writes.
    """
    try:
        yield
    except OSError as exc:
        if not is_full(exc):
            raise
        raise NoSpace(folder, what, needed, free_bytes(folder), exc.errno) from exc


def tree_size(root: Path) -> int:
    """Bytes of the files under ``root`` (``__pycache__`` left out), a block per file at least."""
    total = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in files:
            with contextlib.suppress(OSError):
                total += max(BLOCK, os.stat(os.path.join(folder, name)).st_size)
    return total


class Undo:
    """What this submission wrote into a sweep folder, to be removed when a write fails."""

    def __init__(self) -> None:
        self._trees: list[Path] = []
        self._added_in: list[tuple[Path, frozenset[str]]] = []
        self._files: dict[Path, bytes | None] = {}
        self._claim: Claim | None = None

    @classmethod
    def of_claim(cls, claim: Claim) -> Undo:
        """A new sweep's folder (removed whole when the claim made it, else the entries added),
        or a resumed one's ``submissions.jsonl`` (truncated back)."""
        undo = cls()
        undo._claim = claim
        if not claim.resumed:
            if claim.created:
                undo._trees.append(claim.path)
            else:
                undo._added_in.append((claim.path, claim.before))
                undo.keep(claim.path / "manifest.json")  # a dry run's: put back
        return undo

    def keep(self, path: Path) -> None:
        """Remember ``path``'s bytes now (None: absent) to put them back (or remove the file) on :meth:`run`."""
        path = Path(path)
        if path not in self._files:
            try:
                self._files[path] = path.read_bytes()
            except FileNotFoundError:
                self._files[path] = None

    def run(self) -> str:
        """Remove what was written; returns a phrase saying what was undone. Never raises."""
        done = []
        for tree in self._trees:
            shutil.rmtree(tree, ignore_errors=True)
            done.append(f"{tree} removed")
        for folder, before in self._added_in:
            with contextlib.suppress(OSError):
                for entry in folder.iterdir():
                    if entry.name not in before:
                        if entry.is_dir() and not entry.is_symlink():
                            shutil.rmtree(entry, ignore_errors=True)
                        else:
                            entry.unlink(missing_ok=True)
            done.append(f"what this command wrote into {folder} removed")
        for path, old in self._files.items():
            if any(path.is_relative_to(t) for t in self._trees):
                continue
            with contextlib.suppress(OSError):
                if old is None:
                    path.unlink(missing_ok=True)
                elif not path.exists() or path.read_bytes() != old:
                    path.write_bytes(old)
        claim = self._claim
        if claim is not None and claim.resumed:
            with contextlib.suppress(OSError):
                os.truncate(claim.path / "submissions.jsonl", claim.submissions_size)
            done.append(f"{claim.path} left as it was")
        return "; ".join(done) or "nothing was left behind"

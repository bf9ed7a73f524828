"""This user's private folder for what the kit's jobs on one node share (the port registry, the Ray
start lock).

Every user's jobs used to share ``/tmp/grpokit-ports.json`` and ``/tmp/grpokit-ray-start.lock``,
world-writable: any user could empty or fill the registry or hold the lock and block everyone's jobs,
and under ``fs.protected_regular`` (systemd's default) a second user's ``open(O_CREAT)`` of the first
user's file in sticky ``/tmp`` is refused, so their job failed. Now each user has
``/tmp/grpokit-<uid>`` (mode 0700, checked to be a real folder owned by the user), so nothing
another user can write decides a job; what other users' jobs hold on the node is seen by binding
(:func:`grpokit.runtime.processes.ports.reserve_ports` bind-tests every port).

A ``/tmp/grpokit-<uid>`` that another user made first (or a symlink, a file there) does not stop the
job: it takes this user's own folder beside it, ``/tmp/grpokit-<uid>-<random>`` (made by
``tempfile.mkdtemp``, private from creation; all of the user's jobs on the node take the first such
folder they own, so they still share one), and says so in its log (:func:`choose`). Another user
cannot make a folder owned by this user, so a squatter can only be skipped, never chosen.

``$XDG_RUNTIME_DIR`` is not used: Slurm exports the submitting shell's value, a folder that often
does not exist on the compute node, and all of a user's jobs on a node must agree on one path.
``GRPOKIT_STATE_DIR`` names another folder (it gets the same checks).
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "GRPOKIT_STATE_DIR"


class NodeStateError(RuntimeError):
    """The user's node state folder is not private (message: the path, who owns it, the fix)."""


def default_dir(uid: int | None = None) -> Path:
    """``$GRPOKIT_STATE_DIR``, else ``/tmp/grpokit-<uid>`` (node-local, one per user)."""
    explicit = os.environ.get(ENV)
    return Path(explicit) if explicit else Path(f"/tmp/grpokit-{os.getuid() if uid is None else uid}")


def state_dir(path: Path | None = None) -> Path:
    """The private folder: ``path`` or ``$GRPOKIT_STATE_DIR`` as named (:func:`checked`), else the
    default ``/tmp/grpokit-<uid>`` or, when another user holds that, this user's own folder beside it
    (:func:`choose`).

    Raises:
        NodeStateError: a named folder is not private (:func:`checked`), or no private folder can
            be made.
    """
    if path is not None or os.environ.get(ENV):
        return checked(path or default_dir())
    return choose(default_dir())


#: This process's choice per default path (:func:`choose` scans only once).
_CHOSEN: dict[Path, Path] = {}


def choose(default: Path) -> Path:
    """``default`` when it is (or is made) this user's private folder; else this user's own folder
    beside it: the first real folder named ``<default>-*`` owned by this user, made with
    ``tempfile.mkdtemp`` when there is none (each such choice is logged once, with the reason).

    Raises:
        NodeStateError: neither ``default`` nor a folder beside it can be made.
    """
    try:
        return checked(default)
    except NodeStateError as exc:
        reason = str(exc).split("; fix:")[0]
    known = _CHOSEN.get(default)
    if known is not None and _own_folder(known):
        return known
    chosen = _first_own(default)
    if chosen is None:
        try:
            made = Path(tempfile.mkdtemp(prefix=f"{default.name}-", dir=default.parent))
        except OSError as exc:
            raise NodeStateError(f"{reason}; and no folder of yours could be made beside it: {exc}") from None
        chosen = _first_own(default) or made  # two jobs at once: both take the first one
        if chosen != made:
            made.rmdir()
    if chosen.stat().st_mode & 0o077:
        os.chmod(chosen, 0o700)
    _CHOSEN[default] = chosen
    log.warning(
        "%s; this job uses %s instead (private to you; your other jobs on this node use it too); "
        "removing %s (as its owner or root) gives the default back",
        reason,
        chosen,
        default,
    )
    return chosen


def _own_folder(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def _first_own(default: Path) -> Path | None:
    try:
        names = sorted(e.name for e in os.scandir(default.parent) if e.name.startswith(f"{default.name}-"))
    except OSError:
        return None
    return next((default.parent / n for n in names if _own_folder(default.parent / n)), None)


def checked(path: Path) -> Path:
    """``path`` as the private folder, created mode 0700 when absent; returns its path.

    Checked with ``lstat`` (a symlink is not followed): a folder, owned by this process's uid; group
    or other permission bits on it are taken away (it is ours).

    Raises:
        NodeStateError: the path is a symlink or not a folder, or another user owns it (someone
            created it first to read or steer this user's jobs; the kit will not use it).
    """
    uid = os.getuid()
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise NodeStateError(f"cannot create the kit's node state folder {path}: {exc}; fix: set {ENV}") from None
    st = os.lstat(path)
    fix = f"fix: remove it (as its owner or root), or set {ENV} to a folder of yours on this node's local disk"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise NodeStateError(f"the kit's node state folder {path} is a symlink or not a folder; {fix}")
    if st.st_uid != uid:
        raise NodeStateError(
            f"the kit's node state folder {path} belongs to uid {st.st_uid}, not to you (uid {uid}): another "
            f"user created it, so it cannot hold your jobs' port registry and locks; {fix}"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def private_file(path: Path) -> int:
    """Open (create 0600) ``path`` for reading and writing, never following a symlink; returns the fd."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

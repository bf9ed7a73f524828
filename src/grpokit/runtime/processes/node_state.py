"""This user's private folder for what the kit's jobs on one node share (the port registry, the Ray
start lock).

Every user's jobs used to share ``/tmp/grpokit-ports.json`` and ``/tmp/grpokit-ray-start.lock``,
world-writable: any user could empty or fill the registry or hold the lock and block everyone's jobs,
and under ``fs.protected_regular`` (systemd's default) a second user's ``open(O_CREAT)`` of the first
user's file in sticky ``/tmp`` is refused, so their job failed. Now each user has
``/tmp/grpokit-<uid>`` (mode 0700, checked to be a real folder owned by the user), so nothing
another user can write decides a job; what other users' jobs hold on the node is seen by binding
(:func:`grpokit.runtime.processes.ports.reserve_ports` bind-tests every port).

``$XDG_RUNTIME_DIR`` is not used: Slurm exports the submitting shell's value, a folder that often
does not exist on the compute node, and all of a user's jobs on a node must agree on one path.
``GRPOKIT_STATE_DIR`` names another folder (it gets the same checks).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

ENV = "GRPOKIT_STATE_DIR"


class NodeStateError(RuntimeError):
    """The user's node state folder is not private (message: the path, who owns it, the fix)."""


def default_dir(uid: int | None = None) -> Path:
    """``$GRPOKIT_STATE_DIR``, else ``/tmp/grpokit-<uid>`` (node-local, one per user)."""
    explicit = os.environ.get(ENV)
    return Path(explicit) if explicit else Path(f"/tmp/grpokit-{os.getuid() if uid is None else uid}")


def state_dir(path: Path | None = None) -> Path:
    """The private folder, created mode 0700 when absent; returns its path.

    Checked with ``lstat`` (a symlink is not followed): a folder, owned by this process's uid; group
    or other permission bits on it are taken away (it is ours).

    Raises:
        NodeStateError: the path is a symlink or not a folder, or another user owns it (someone
            created it first to read or steer this user's jobs; the kit will not use it).
    """
    path = path or default_dir()
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

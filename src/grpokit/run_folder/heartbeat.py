"""``<run>/heartbeat.json``: the driver's proof of life and its last word, in a fixed-size record.

The driver writes the record when it opens an attempt: a JSON object padded with spaces to
:data:`RECORD_BYTES` bytes, fsynced, so its blocks are allocated while the disk still has room.
While the attempt runs it touches the file's modification time every ``beat_s`` seconds
(:class:`Beater`; ``os.utime`` needs no free space), and when it closes the attempt it writes the
outcome *into the same bytes* (:func:`write_outcome`: ``pwrite`` at offset 0, no truncation, no new
block), before it rewrites ``status.json``. So on a full disk, where ``status.json`` cannot be
replaced, the outcome still reaches every reader (:mod:`grpokit.run_folder.liveness`).

Record (JSON object, keys written at the open): ``attempt`` (1-based), ``job_id`` (Slurm's id of
this task, None outside Slurm), ``host``, ``pid`` (the driver's), ``beat_s``, ``opened`` (UTC ISO
time); at the close also ``state``, ``ended_by``, ``reason`` (cut to fit), ``closed``. Its age
(now - mtime, seconds) is the time since the driver's last beat.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpokit.run_folder.atomic import now
from grpokit.run_folder.layout import HEARTBEAT

log = logging.getLogger(__name__)

#: Bytes of the record: the outcome (its reason cut to fit) is written into them in place.
RECORD_BYTES = 4096
#: Seconds between beats (``runtime.heartbeat_s``'s default).
DEFAULT_BEAT_S = 30.0
#: A beat older than this many intervals means the driver is gone (room for a shared file
#: system's attribute caching, a loaded node, and clocks that differ a little).
STALE_BEATS = 6
#: ... and never less than this many seconds.
STALE_MIN_S = 10.0


def _encode(record: dict[str, Any]) -> bytes:
    """``record`` as JSON padded with spaces to :data:`RECORD_BYTES`; a reason that does not fit is cut."""
    data = json.dumps(record).encode()
    while len(data) > RECORD_BYTES and record.get("reason"):
        reason = str(record["reason"])
        cut = max(0, len(reason) - (len(data) - RECORD_BYTES) - 8)
        record = {**record, "reason": reason[:cut] + " [...]"}
        data = json.dumps(record).encode()
    if len(data) > RECORD_BYTES:
        raise ValueError(f"heartbeat record of {len(data)} bytes exceeds {RECORD_BYTES}")
    return data + b" " * (RECORD_BYTES - len(data))


def open_record(run_dir: Path | str, *, attempt: int, job_id: str | None, beat_s: float) -> Path:
    """Write the attempt's record (allocating its bytes); returns its path.

    Raises:
        OSError: the run folder cannot be written (a full disk among them).
    """
    path = Path(run_dir) / HEARTBEAT
    record = {
        "attempt": attempt,
        "job_id": job_id,
        "host": os.uname().nodename,
        "pid": os.getpid(),
        "beat_s": beat_s,
        "opened": now(),
    }
    payload = _encode(record)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        os.pwrite(fd, payload, 0)
        os.ftruncate(fd, RECORD_BYTES)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def write_outcome(run_dir: Path | str, *, attempt: int, state: str, ended_by: str, reason: str) -> None:
    """Write the attempt's outcome into its record in place (no new block: works on a full disk).

    Raises:
        OSError: no record to write into, or the write failed.
    """
    path = Path(run_dir) / HEARTBEAT
    old = read_record(run_dir)
    base = old.fields if old is not None and old.fields.get("attempt") == attempt else {"attempt": attempt}
    record = {**base, "state": str(state), "ended_by": str(ended_by), "reason": reason, "closed": now()}
    fd = os.open(path, os.O_WRONLY)  # no O_CREAT / O_TRUNC: the bytes allocated at the open
    try:
        os.pwrite(fd, _encode(record), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Record:
    """The record read back: ``fields`` (the JSON object) and ``age_s`` (seconds since the last beat)."""

    fields: dict[str, Any]
    age_s: float

    @property
    def stale_after_s(self) -> float:
        """Seconds without a beat after which the driver counts as gone."""
        beat = float(self.fields.get("beat_s") or DEFAULT_BEAT_S)
        return max(STALE_MIN_S, STALE_BEATS * beat)

    @property
    def stale(self) -> bool:
        return self.age_s > self.stale_after_s

    @property
    def outcome(self) -> dict[str, Any] | None:
        """``{"state", "ended_by", "reason"}`` once the driver closed the attempt, else None."""
        if not self.fields.get("state"):
            return None
        return {k: self.fields.get(k) for k in ("state", "ended_by", "reason")}


def read_record(run_dir: Path | str, now_s: float | None = None) -> Record | None:
    """The record of ``run_dir``; None when there is none or it is not a JSON object (a kit
    without heartbeats wrote the folder, or the open itself failed)."""
    path = Path(run_dir) / HEARTBEAT
    try:
        with open(path, "rb") as f:
            data = f.read(RECORD_BYTES * 2)
            mtime = os.fstat(f.fileno()).st_mtime
    except OSError:
        return None
    try:
        fields = json.loads(data.decode().strip() or "null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(fields, dict):
        return None
    return Record(fields, max(0.0, (time.time() if now_s is None else now_s) - mtime))


class Beater:
    """A daemon thread touching the record every ``beat_s`` seconds until :meth:`stop`."""

    def __init__(self, path: Path, beat_s: float):
        self.path, self.beat_s = Path(path), float(beat_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Beater:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                os.utime(self.path)
            except OSError as exc:  # a missing folder, a read-only remount: the readers see it stale
                log.warning("heartbeat %s: %s", self.path, exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

"""The run-folder contract (docs/run-folder.md): file names, atomic writes, states, status, manifest.

- :mod:`~grpokit.run_folder.layout`: every file name; :class:`SweepFolder`, :class:`RunFolder`,
  :class:`AttemptFolder`.
- :mod:`~grpokit.run_folder.atomic`: temp file + fsync + rename writes, ``now()``.
- :mod:`~grpokit.run_folder.states`: ``status.json``'s words as enums, the final states.
- :mod:`~grpokit.run_folder.status_record`: ``status.json`` as typed records (:class:`PointStatus`,
  :class:`Attempt`), the one reader :func:`read_status` and :func:`write_status`.
- :mod:`~grpokit.run_folder.status_file`: the driver's writer (:class:`StatusFile`).
- :mod:`~grpokit.run_folder.heartbeat`: the driver's fixed-size liveness and outcome record.
- :mod:`~grpokit.run_folder.liveness`: an attempt left open, decided from evidence.
- :mod:`~grpokit.run_folder.point_state`: a point's state word from its status and Slurm's view.
- :mod:`~grpokit.run_folder.manifest`: ``manifest.json``.
- :mod:`~grpokit.run_folder.halving_record`: ``halving.json`` (successive halving's plan and stages).
- :mod:`~grpokit.run_folder.claim`: claiming a sweep folder (``submissions.jsonl``).
- :mod:`~grpokit.run_folder.sweep_reader`: a sweep folder read back (manifest + each status).
- :mod:`~grpokit.run_folder.metrics`: per-attempt metrics merged into one series (imports pandas).

Nothing here imports the submit, runtime or results layers.
"""

from grpokit.run_folder.atomic import now, write_bytes_atomic, write_json_atomic
from grpokit.run_folder.layout import AttemptFolder, RunFolder, SweepFolder
from grpokit.run_folder.states import FINAL_STATES, SUCCESS_STATES, EndedBy, PointState
from grpokit.run_folder.status_file import StatusFile
from grpokit.run_folder.status_record import (
    Attempt,
    PointStatus,
    StatusFileError,
    pending_status,
    read_status,
    read_status_or_none,
    write_status,
)

__all__ = [
    "FINAL_STATES",
    "SUCCESS_STATES",
    "Attempt",
    "AttemptFolder",
    "EndedBy",
    "PointState",
    "PointStatus",
    "RunFolder",
    "StatusFile",
    "StatusFileError",
    "SweepFolder",
    "now",
    "pending_status",
    "read_status",
    "read_status_or_none",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_status",
]

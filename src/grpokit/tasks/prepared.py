"""A prepared data folder (``data/<task>/``): input rows read with every bad one named, the splits
written all-or-nothing, and a ``manifest.json`` of what was written.

Reading: :func:`read_jsonl` yields ``(line, object)`` pairs of a JSON Lines file and records each line
that is not UTF-8 or not a JSON object in a :class:`RowProblems`; the task's own field checks add
theirs to the same list; :meth:`RowProblems.raise_if_any` then raises one :class:`DataError` that
names file, line, field and fix of every bad row.

Writing: :func:`staged_output` gives a temporary folder beside ``out``; the task writes every file
there; only when the ``with`` block ends without an error are the files moved into ``out`` (each by
``os.replace``) and ``manifest.json`` written last, so a failed split leaves ``out`` as it was and a
folder without ``manifest.json`` is not a finished preparation.

``manifest.json``::

    {"task": "gsm8k", "created": iso8601, "source": "<folder or hub id>",
     "source_files": {"<abs path>": {"sha256": hex, "bytes": int}},
     "options": {...},                                   # the preparer's settings (seed, counts)
     "files": {"train.parquet": {"rows": int, "sha256": hex, "bytes": int}, ...}}
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from grpokit.run_folder import now, write_json_atomic

MANIFEST = "manifest.json"
MAX_SHOWN = 50
"""Bad rows listed in a :class:`DataError`'s message; the rest are counted."""


@dataclass(frozen=True)
class RowProblem:
    """One bad input row. where: ``<file>:<line>`` (or ``<hub id> <split> row <n>``); field: the
    field at fault (``""`` for the whole row); what: what is wrong; fix: what to change."""

    where: str
    field: str
    what: str
    fix: str

    def __str__(self) -> str:
        at = f" field {self.field!r}:" if self.field else ""
        return f"{self.where}:{at} {self.what}; fix: {self.fix}"


class DataError(ValueError):
    """Input the preparer cannot use. ``problems``: every bad row (:class:`RowProblem` or a line of
    text for a file-level fault); the message lists the first :data:`MAX_SHOWN` and counts the rest."""

    def __init__(self, problems: list[RowProblem | str]):
        self.problems = list(problems)
        shown = [str(p) for p in self.problems[:MAX_SHOWN]]
        more = len(self.problems) - len(shown)
        if more:
            shown.append(f"... and {more} more problem(s) of the same checks")
        super().__init__("\n".join(shown))


@dataclass
class RowProblems:
    """Problems collected while reading; ``raise_if_any`` turns them into one :class:`DataError`."""

    items: list[RowProblem | str] = field(default_factory=list)

    def add(self, where: str, field_name: str, what: str, fix: str) -> None:
        self.items.append(RowProblem(where, field_name, what, fix))

    def add_text(self, line: str) -> None:
        self.items.append(line)

    def raise_if_any(self) -> None:
        if self.items:
            raise DataError(self.items)


def read_jsonl(path: Path, problems: RowProblems, *, example: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``path`` that is a UTF-8 JSON object.

    A line that is not UTF-8, not JSON or not an object is added to ``problems`` (with ``example``,
    one valid line, in the fix) and skipped; a file without any non-blank line adds one problem.
    Raises FileNotFoundError when ``path`` does not exist.
    """
    rows = 0
    one_per_line = f"one JSON object per line: {example}"
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            where = f"{path}:{number}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.add(
                    where,
                    "",
                    f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                    "save the file as UTF-8",
                )
                continue
            if not text.strip():
                continue
            rows += 1
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                problems.add(where, "", f"not JSON ({exc.msg} at column {exc.colno})", one_per_line)
                continue
            if not isinstance(obj, dict):
                problems.add(where, "", f"a JSON {type(obj).__name__}, not an object", one_per_line)
                continue
            yield number, obj
    if rows == 0:
        problems.add(str(path), "", "no rows (the file is empty)", f"fill it with {one_per_line}")


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_entry(path: Path) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if path.suffix == ".parquet":
        entry["rows"] = pq.ParquetFile(path).metadata.num_rows
    entry.update(sha256=sha256_file(path), bytes=path.stat().st_size)
    return entry


@contextmanager
def staged_output(
    out: Path,
    *,
    task: str,
    source: str,
    source_files: list[Path] | None = None,
    options: Mapping[str, Any] | None = None,
) -> Iterator[Path]:
    """A temporary folder beside ``out`` to write the prepared files into.

    On a clean exit every file written there (sub-folders included) is moved into ``out`` with
    ``os.replace``, ``out/manifest.json`` having been removed first and written last; on an
    exception nothing in ``out`` changes. The temporary folder is always removed. Files already in
    ``out`` that this preparation did not write are left alone (the manifest lists the ones it did).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.preparing-"))
    try:
        yield tmp
        written = sorted(p for p in tmp.rglob("*") if p.is_file())
        manifest = {
            "task": task,
            "created": now(),
            "source": source,
            "source_files": {
                str(Path(p).resolve()): {"sha256": sha256_file(p), "bytes": Path(p).stat().st_size}
                for p in (source_files or [])
            },
            "options": dict(options or {}),
            "files": {p.relative_to(tmp).as_posix(): _file_entry(p) for p in written},
        }
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)
        for p in written:
            target = out / p.relative_to(tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(p, target)
        write_json_atomic(out / MANIFEST, manifest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """``<folder>/manifest.json`` parsed, or None when the folder has none."""
    path = Path(folder) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None

"""The packages of the Python the job will run, asked from where the sweep command runs.

The job runs ``cluster.python`` when set (another virtual environment's or a container's
interpreter on the GPU nodes: submitit's ``python``), else the sweep command's own interpreter
(submitit's default, and ``slurm/train.sbatch``'s ``$GRPOKIT_PYTHON``). :func:`ask` runs that
interpreter once with a short probe (``importlib.metadata``: every installed distribution and its
version, and the folders of its ``sys.path``) and keeps the answer in
``<cache dir>/job-env-<hash of the interpreter's path and PYTHONPATH>.json``
(:func:`grpokit.config.verl_schema.cache_dir`). A kept answer is used while the interpreter file
and every ``sys.path`` folder it reported keep their modification times (installing or removing a
package changes its ``site-packages`` folder's), so a changed environment is asked again.

Cost, measured on this project's 2-core CI machine: the first ask of the kit's own environment
about 0.4 s (the interpreter's start and ``importlib.metadata``), a kept answer about 1 ms.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from grpokit.config.verl_schema import cache_dir

#: The probe the job's interpreter runs: its version, its sys.path folders, its distributions.
#: A distribution found twice (a fork's checkout on PYTHONPATH before an installed verl) is the one
#: found first on sys.path, as the import system finds it; verl's folder is found without importing it.
_PROBE = (
    "import importlib.metadata as m, importlib.util as u, json, sys\n"
    "packages = {}\n"
    "for d in m.distributions(): packages.setdefault(d.metadata['Name'] or '', d.version)\n"
    "spec = u.find_spec('verl')\n"
    "folder = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None\n"
    "print(json.dumps({'version': sys.version.split()[0], 'path': [p for p in sys.path if p],\n"
    "  'packages': packages, 'verl_folder': folder}))\n"
)
ASK_TIMEOUT_S = 60


def normalise(name: str) -> str:
    """PEP 503's normal form of a distribution name (``Flash_Attn`` -> ``flash-attn``): packaging's
    ``canonicalize_name``."""
    return canonicalize_name(name)


@dataclasses.dataclass(frozen=True)
class JobEnvironment:
    """What the job's interpreter has.

    python: the interpreter asked (as given). version: its Python version (``3.11.7``).
    packages: ``{normalised distribution name: version}``. error: why it could not be asked
    (None when it answered); then ``packages`` is empty and nothing may be concluded from it.
    verl_folder: the folder of the ``verl`` package it imports (an installed wheel's, an editable
    checkout's, one on ``PYTHONPATH``), None when it has none.
    """

    python: str
    version: str = ""
    packages: Mapping[str, str] = dataclasses.field(default_factory=dict)
    error: str | None = None
    verl_folder: str | None = None

    def version_of(self, distribution: str) -> str | None:
        """The installed version of ``distribution`` (any spelling), None when it is not installed."""
        return self.packages.get(normalise(distribution))


def local_verl() -> tuple[str | None, str | None]:
    """``(version, folder)`` of the verl this command validates against (not imported: metadata and
    the import system's spec); ``(None, None)`` when it has none."""
    import importlib.metadata
    import importlib.util

    try:
        version = importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    spec = importlib.util.find_spec("verl")
    folder = next(iter(spec.submodule_search_locations), None) if spec and spec.submodule_search_locations else None
    return version, folder


def job_python(cluster_python: str | None) -> str:
    """The interpreter the job runs: ``cluster.python`` when set, else this command's own."""
    return cluster_python or sys.executable


def _cache_file(python: str) -> Path:
    # PYTHONPATH is handed to the job (sbatch exports it): a fork's checkout on it is another environment
    seed = f"{python}\0{os.environ.get('PYTHONPATH', '')}"
    return cache_dir() / f"job-env-{hashlib.sha256(seed.encode()).hexdigest()[:16]}.json"


def _stamps(python: str, folders: list[str]) -> dict[str, int]:
    """Modification times (ns) of the interpreter and of each folder; a missing one is -1."""
    stamps = {}
    for path in [python, *folders]:
        try:
            stamps[path] = os.stat(path).st_mtime_ns
        except OSError:
            stamps[path] = -1
    return stamps


def _kept(python: str) -> JobEnvironment | None:
    try:
        kept = json.loads(_cache_file(python).read_text())
        if kept["stamps"] != _stamps(python, list(kept["stamps"])[1:]):
            return None
        return JobEnvironment(python, kept["version"], kept["packages"], verl_folder=kept.get("verl_folder"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@functools.cache
def ask(python: str) -> JobEnvironment:
    """The packages of ``python`` (kept on disk until its environment changes; see the module).

    Never raises: an interpreter that cannot be run here (a container's path, a node-only mount)
    gives a :class:`JobEnvironment` whose ``error`` says why.
    """
    kept = _kept(python)
    if kept is not None:
        return kept
    try:
        out = subprocess.run(
            # the caller's environment, as sbatch hands it to the job (PYTHONPATH included: a fork of
            # verl on it is the job's verl); run from / so no file of the working folder shadows the probe's
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT_S,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return JobEnvironment(python, error=f"{type(exc).__name__}: {exc}")
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        return JobEnvironment(python, error=last[:300])
    try:
        answer = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return JobEnvironment(python, error=f"its answer is not the probe's JSON: {out.stdout[:200]!r}")
    packages = {normalise(n): v for n, v in answer["packages"].items() if n}
    folders = [p for p in answer["path"] if os.path.isdir(p)]
    try:
        target = _cache_file(python)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_suffix(f".{os.getpid()}.tmp")
        stamps = _stamps(python, folders)
        kept = {"version": answer["version"], "packages": packages, "verl_folder": answer.get("verl_folder")}
        temp.write_text(json.dumps({"stamps": stamps, **kept}))
        os.replace(temp, target)
    except OSError:
        pass  # an unwritable cache only means the next command asks again
    return JobEnvironment(python, answer["version"], packages, verl_folder=answer.get("verl_folder"))


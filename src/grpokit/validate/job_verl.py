"""Which verl the points are validated against: the job's, asked in the job's Python when it differs.

The job runs the verl of its environment (:mod:`grpokit.validate.job_environment`: ``cluster.python``
or this command's interpreter, with the ``PYTHONPATH`` sbatch hands over). When that verl is this
command's own (same version, same folder), verl's side of validation runs here, in-process, as it
always did. When it differs (another release in the tested range, a fork's editable checkout or
one on ``PYTHONPATH``), :func:`validate` runs :mod:`grpokit.validate.verl_worker` once in the job's
Python for all the points (JSON in and out): each point is composed from that verl's config and
checked by its ``validate_config``, config dataclasses and registries; the kit's own checks then run
here on the configs it sends back.

The worker is this command's own grpokit (a folder holding only a link to it is put first on the
worker's ``PYTHONPATH``, so nothing else of this environment shadows the job's), so the request and
the answer always match. Its answer is kept in the cache folder under a digest of the request, the
interpreter, ``PYTHONPATH`` and the path, size and time of every file of that verl and of the
worker's modules: asking again for the same points costs a file read. Cost, this project's loaded
2-core machine: a worker whose points verl passed before (verl not imported) about 2 s, one that
imports verl 15-25 s, a kept answer a few ms.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import subprocess
from pathlib import Path

from grpokit.config.verl_schema import _write_atomic, cache_dir
from grpokit.problems import Problem
from grpokit.validate.job_environment import JobEnvironment, local_verl

WORKER = "grpokit.validate.verl_worker"
WORKER_TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True)
class VerlTarget:
    """The verl the points are validated against.

    version, folder: that verl's release and package folder (None, None: none found).
    python: the interpreter that has it. remote: True when it is not this command's verl (the
    checks then run in ``python``).
    """

    version: str | None
    folder: str | None
    python: str
    remote: bool

    def line(self) -> str:
        """``verl 0.8.0 at <folder> (the job's Python <python>; validated there)``."""
        where = "validated in the job's Python" if self.remote else "validated here"
        return f"verl {self.version} at {self.folder} ({where}, {self.python})"


def _same_folder(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def target(env: JobEnvironment) -> VerlTarget:
    """The job's verl when ``env`` answered and has one that differs from this command's (version
    or folder), else this command's own (also when ``env`` could not be asked)."""
    here_version, here_folder = local_verl()
    there = env.version_of("verl")
    if env.error is not None or there is None:
        return VerlTarget(here_version, here_folder, env.python, remote=False)
    if there == here_version and (env.verl_folder is None or _same_folder(env.verl_folder, here_folder)):
        return VerlTarget(here_version, here_folder, env.python, remote=False)
    return VerlTarget(there, env.verl_folder, env.python, remote=True)


@dataclasses.dataclass
class Answer:
    """The worker's answer: per point ``(config container or None, problems)``; verl's registries there."""

    points: list[tuple[dict | None, list[Problem]]]
    registries: dict[str, list[str]]


def _worker_path() -> Path:
    """A folder holding only a link named ``grpokit`` to this command's grpokit package."""
    import grpokit

    package = Path(grpokit.__file__).resolve().parent
    folder = cache_dir() / f"worker-{hashlib.sha256(str(package).encode()).hexdigest()[:16]}"
    link = folder / "grpokit"
    if not link.exists():
        folder.mkdir(parents=True, exist_ok=True)
        temp = folder / f".grpokit.{os.getpid()}"
        temp.unlink(missing_ok=True)
        temp.symlink_to(package, target_is_directory=True)
        os.replace(temp, link)
    return folder


def _files_digest(folders: list[Path]) -> str:
    digest = hashlib.sha256()
    for root in folders:
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith((".py", ".yaml"))):
                stat = os.stat(os.path.join(dirpath, name))
                digest.update(f"{dirpath}/{name}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def _request(specs) -> dict:
    return {
        "points": [
            {
                "name": s.name,
                "verl_overrides": list(s.verl_overrides),
                "kit_overrides": list(s.kit_overrides),
                "verl_entry": dict(s.verl_entry or {}),
            }
            for s in specs
        ]
    }


def validate(verl: VerlTarget, specs) -> Answer:
    """verl's side of validation for ``specs`` (:class:`~grpokit.config.point.PointSpec`), run by
    ``verl.python`` (see the module); kept answers are read back.

    Never raises: a worker that fails gives every point one problem naming the interpreter and its
    last line of error.
    """
    request = json.dumps(_request(specs), sort_keys=True)
    worker_home = Path(__file__).resolve().parents[1]
    pythonpath = os.environ.get("PYTHONPATH", "")
    seed = f"{verl.python}\0{pythonpath}\0{verl.version}\0{verl.folder}\0{request}\0"
    folders = [Path(verl.folder)] if verl.folder else []
    key = hashlib.sha256(
        (seed + _files_digest([*folders, worker_home / "validate", worker_home / "config"])).encode()
    ).hexdigest()[:32]
    path = cache_dir() / f"job-verl-{key}.json"
    try:
        return _parse(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    raw, error = _run(verl, request, pythonpath)
    if error is not None:
        problem = Problem(
            "all points",
            "cluster.python",
            f"verl's checks could not run in the job's Python ({verl.python}, verl {verl.version} at "
            f"{verl.folder}): {error}",
            "make the job's environment import verl and grpokit (python -c 'import verl, grpokit'), "
            "or run the sweep command from that environment",
        )
        return Answer([(None, [problem]) for _ in specs], {})
    _write_atomic(path, json.dumps(raw).encode())
    return _parse(raw)


def _run(verl: VerlTarget, request: str, pythonpath: str) -> tuple[dict | None, str | None]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(_worker_path()), pythonpath] if p)
    try:
        out = subprocess.run(
            [verl.python, "-m", WORKER],
            input=request,
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT_S,
            cwd="/",
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    _relay_notes(out.stderr)
    if out.returncode != 0:
        return None, (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1][:300]
    try:
        return json.loads(out.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, f"its answer is not JSON: {out.stdout[-200:]!r}"


def _relay_notes(stderr: str) -> None:
    from grpokit.problems import note

    for line in stderr.splitlines():
        if line.startswith("note: "):
            note(line.removeprefix("note: "))


def _parse(raw: dict) -> Answer:
    points = [(p["config"], [Problem(*t) for t in p["problems"]]) for p in raw["points"]]
    return Answer(points, dict(raw["registries"]))


@functools.cache
def _cached_target(python: str, pythonpath: str) -> VerlTarget:
    from grpokit.validate.job_environment import ask

    return target(ask(python))


def of(cluster_python: str | None) -> VerlTarget:
    """:func:`target` of the job's environment for ``cluster.python`` (asked once per process)."""
    from grpokit.validate.job_environment import job_python

    return _cached_target(job_python(cluster_python), os.environ.get("PYTHONPATH", ""))

"""What each task brings, for the generic layers to ask: its sidecar kinds, its data builder, its reward.

A task is a package under :data:`TASKS_PACKAGE` whose ``__init__`` sets ``TASK`` (a :class:`Task`),
or another distribution's entry point in the group :data:`ENTRY_POINT_GROUP` that loads to one (a
task package of a project's own). The generic layers (the sidecars, ``grpokit prepare-data``, the
sidecar keys' checks) read :func:`tasks` and :func:`sidecar_kinds`; none of them names a task, and a
new task is a new folder under ``tasks/`` with its ``TASK``, nothing else.

A task package's ``__init__`` stays light (dataclasses and strings): the modules behind a task (the
data builder's pandas and datasets, the memory server's FastAPI) are imported only when used.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

#: The package whose sub-packages are the kit's own tasks.
TASKS_PACKAGE = "grpokit.tasks"
#: The entry-point group of tasks from other distributions (``[project.entry-points."grpokit.tasks"]``).
ENTRY_POINT_GROUP = "grpokit.tasks"


@dataclasses.dataclass(frozen=True)
class SidecarKind:
    """A kind of sidecar a task brings: ``sidecars.<name>.kind: <name>``.

    name: the kind's name in the experiment file.
    settings: the dataclass of the kind's own keys (``sidecars.<name>.<key>`` beside the keys every
        sidecar has, :class:`grpokit.config.schema.SidecarConf`); each key's one default is there.
    command: ``(sidecar, others) -> argv``: the kind's command line; ``sidecar`` and each of
        ``others`` (by sidecar name) have ``.host``, ``.port``, ``.url`` and ``.spec`` (its settings,
        the kind's keys as attributes); the key is never on the command line.
    key_env: the environment variable carrying the sidecar's client key (the server reads its own
        from there; the trainer's reward workers get it too).
    peer_keys: ``spec -> {variable: sidecar name}``: the other sidecars' keys this one is given in its
        environment (the memory server's key to its answer server).
    """

    name: str
    settings: type
    command: Callable[[Any, Mapping[str, Any]], list[str]]
    key_env: str
    peer_keys: Callable[[Any], dict[str, str]] = lambda spec: {}


@dataclasses.dataclass(frozen=True)
class Task:
    """One task's plugin record.

    name: the task's name (``grpokit prepare-data <name>``, ``experiment.task``).
    data: the module that builds its train/test parquet files (``add_arguments(parser)`` and
        ``main(args)``; :mod:`grpokit.cli.prepare_data`), or None.
    reward: its verl reward function as ``module:function`` (``custom_reward_function``), or None
        (verl's own score for the data source).
    sidecar_kinds: the sidecar kinds it brings.
    """

    name: str
    data: str | None = None
    reward: str | None = None
    sidecar_kinds: tuple[SidecarKind, ...] = ()


@functools.cache
def tasks() -> dict[str, Task]:
    """Every task: the ``TASK`` of each package under :data:`TASKS_PACKAGE`, then the entry points
    of :data:`ENTRY_POINT_GROUP` (a name already taken is kept); sorted by name.

    Raises:
        ValueError: a task's record is not a :class:`Task`, or two records of the kit share a name
            (names the module).
    """
    found: dict[str, Task] = {}
    package = importlib.import_module(TASKS_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{TASKS_PACKAGE}.{info.name}")
        task = getattr(module, "TASK", None)
        if task is None:
            continue
        if not isinstance(task, Task) or task.name in found:
            raise ValueError(f"{module.__name__}.TASK: expected a grpokit Task of a name of its own, got {task!r}")
        found[task.name] = task
    for point in entry_points(group=ENTRY_POINT_GROUP):
        task = point.load()
        if not isinstance(task, Task):
            raise ValueError(f"entry point {point.name} = {point.value} ({ENTRY_POINT_GROUP}): not a grpokit Task")
        found.setdefault(task.name, task)
    return dict(sorted(found.items()))


def sidecar_kinds() -> dict[str, SidecarKind]:
    """The sidecar kinds the tasks bring, by kind name.

    Raises:
        ValueError: two tasks bring a kind of the same name.
    """
    out: dict[str, SidecarKind] = {}
    for task in tasks().values():
        for kind in task.sidecar_kinds:
            if kind.name in out:
                raise ValueError(f"sidecar kind {kind.name!r} is brought by two tasks; rename one (task {task.name})")
            out[kind.name] = kind
    return out

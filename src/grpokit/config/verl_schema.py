"""verl's own trainer configuration, composed from the installed package.

The kit never copies verl's schema: it composes ``verl/trainer/config/ppo_trainer.yaml`` from the
installed wheel with Hydra's compose API, so a verl upgrade changes the schema in one place.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

#: verl's trainer config name (``python -m verl.trainer.main_ppo`` uses the same).
VERL_CONFIG_NAME = "ppo_trainer"
#: verl's Megatron config (``--config-name=ppo_megatron_trainer``: ``ppo_trainer`` with ``model_engine: megatron``).
MEGATRON_CONFIG_NAME = "ppo_megatron_trainer"


@dataclasses.dataclass(frozen=True)
class VerlConfigRef:
    """Which verl config a point composes: ``--config-name`` in ``--config-path`` (None: verl's own
    ``trainer/config`` folder). A recipe's folder (``recipe/dapo/config``) composes with verl's
    folder on Hydra's search path, as its ``defaults: [ppo_trainer]`` expects. groups: the script's
    choices of the config's Hydra groups, as verl's command line spells them (``("model_engine=megatron",)``:
    ``ppo_trainer`` with Megatron's actor, ref and critic configs)."""

    name: str = VERL_CONFIG_NAME
    config_dir: str | None = None
    groups: tuple[str, ...] = ()

    @property
    def option(self) -> str:
        """Its option name in the kit's ``verl_base`` config group (``verl_base@verl=<option>``): the
        config name in verl's folder, ``recipe_<name>`` in a recipe's (which may reuse verl's names), then
        ``__<group>-<choice>`` per group choice (``ppo_trainer__model_engine-megatron``)."""
        base = f"recipe_{self.name}" if self.config_dir else self.name
        return base + "".join(f"__{g.replace('=', '-', 1)}" for g in self.groups)

    def folder(self) -> Path:
        return Path(self.config_dir) if self.config_dir else verl_config_dir()

    def hydra_overrides(self) -> list[str]:
        """The search-path override a recipe's folder needs (its own ``file://verl/trainer/config``
        is relative to a verl checkout; [] for verl's own folder), then the group choices."""
        return [*([f"hydra.searchpath=[file://{verl_config_dir()}]"] if self.config_dir else []), *self.groups]


def config_groups(ref: VerlConfigRef) -> frozenset[str]:
    """The root-level Hydra config groups ``ref`` composes from: the sub-folders of its config folder
    (and of verl's, on a recipe's search path), e.g. verl's ``model_engine``, ``actor``, ``data``.

    Hydra reads ``name=<choice>`` with such a ``name`` as a group choice (``model_engine=megatron``
    selects ``model_engine/megatron.yaml``), not as a value."""
    folders = {ref.folder(), verl_config_dir()} if ref.config_dir else {ref.folder()}
    return frozenset(
        p.name for f in folders if f.is_dir() for p in f.iterdir() if p.is_dir() and not p.name.startswith("__")
    )


#: The config this process composes (:func:`use`); verl's ``ppo_trainer`` unless a point or script says otherwise.
_active: list[VerlConfigRef] = [VerlConfigRef()]


def use(ref: VerlConfigRef | None) -> None:
    """Make ``ref`` (None: verl's ``ppo_trainer``) the config :func:`verl_base`, :func:`apply_overrides`
    and :func:`compose_verl` compose in this process (a sweep composes one config for all its points)."""
    _active[0] = ref or VerlConfigRef()


def active() -> VerlConfigRef:
    """The config this process composes (see :func:`use`)."""
    return _active[0]


def verl_config_dir() -> Path:
    """The ``trainer/config`` folder of the installed verl, found without importing verl.

    Importing verl takes seconds (``verl/__init__.py`` imports ``verl.protocol``, hence tensordict
    and torch); only :func:`grpokit.validate.verl_check.run_validate_config` needs verl's code.

    Raises:
        ModuleNotFoundError: verl is not installed.
    """
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("verl is not installed (pip install verl); the kit composes its trainer config")
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def lean_imports() -> None:
    """Call before importing verl: keeps TensorFlow, JAX and their log lines out of the process."""
    # verl imports `datasets`, which imports TensorFlow and JAX when they are installed (the GPU
    # image has JAX): seconds per process for frameworks the kit never uses.
    os.environ.setdefault("USE_TF", "0")
    os.environ.setdefault("USE_JAX", "0")
    # ...and logs "Disabling Tensorflow/JAX because ..." at INFO on import: noise in every command.
    datasets_log = logging.getLogger("datasets")
    if datasets_log.level == logging.NOTSET:
        datasets_log.setLevel(logging.WARNING)


def compose_verl(overrides: list[str], ref: VerlConfigRef | None = None) -> DictConfig:
    """Compose verl's config ``ref`` (default :func:`active`: ``ppo_trainer``) with ``overrides``
    (Hydra override grammar); the ``hydra`` node a recipe's config declares is left out.

    Works on a machine without a GPU. Runs outside any running Hydra app: a global Hydra
    instance (the sweep's) is saved and restored around the call.

    Raises:
        hydra.errors.ConfigCompositionException: an override names a key verl does not have
            (verl's message: "Could not override ... To append use +key") or has a bad value.
    """
    ref = ref or active()
    saved = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(ref.folder()), version_base=None):
            return compose(ref.name, overrides=[*ref.hydra_overrides(), *overrides])
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:
            GlobalHydra.instance().initialize(saved)


def verl_base() -> DictConfig:
    """verl's defaults of the :func:`active` config, unresolved (interpolations kept as written in
    verl's YAML); see :func:`base_of`."""
    return base_of(active())


@functools.lru_cache(maxsize=4)
def base_of(ref: VerlConfigRef) -> DictConfig:
    """verl's defaults of config ``ref``, unresolved (interpolations kept as written in verl's YAML).

    Composed once per installed verl and kept in :func:`cache_dir` (a pickle of the composed
    config, about a second of Hydra composition saved per command). The file's name is the
    :func:`defaults_key` of what the composition reads: verl's version, hydra-core's and
    omegaconf's, Python's, and every file of verl's config folder (path and bytes); anything
    else in the folder (an edited YAML, an upgrade) gives another key, hence a new composition.
    A cache that cannot be read or written is recomposed / skipped, never an error.
    """
    path = cache_dir() / f"verl_defaults-{ref_key(ref)}.pickle"
    try:
        cfg = pickle.loads(path.read_bytes())
        if isinstance(cfg, DictConfig):
            return cfg
    except Exception:  # noqa: BLE001 - missing, truncated or from an incompatible library: recompose
        pass
    cfg = compose_verl([], ref)
    _write_atomic(path, pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL))
    return cfg


verl_base.cache_clear = base_of.cache_clear  # type: ignore[attr-defined]  (tests recompose)


def cache_dir() -> Path:
    """``$GRPOKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/grpokit``, else ``~/.cache/grpokit``."""
    if os.environ.get("GRPOKIT_CACHE_DIR"):
        return Path(os.environ["GRPOKIT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grpokit"


def ref_key(ref: VerlConfigRef) -> str:
    """:func:`defaults_key` of verl's folder, and for another config than ``ppo_trainer`` its name,
    folder, group choices and (a recipe's) files too: a hex digest of what ``ref``'s composed defaults depend on."""
    key = defaults_key(verl_config_dir())
    if ref == VerlConfigRef():
        return key
    groups = f"\0{','.join(ref.groups)}" if ref.groups else ""
    digest = hashlib.sha256(f"{key}\0{ref.name}\0{ref.config_dir}{groups}".encode())
    if ref.config_dir:
        _digest_files(digest, ref.folder())
    return digest.hexdigest()[:32]


def defaults_key(config_dir: Path) -> str:
    """A hex digest of everything verl's composed defaults depend on (see :func:`verl_base`)."""
    digest = hashlib.sha256()
    versions = [_version(name) for name in ("verl", "hydra-core", "omegaconf")]
    digest.update(repr((versions, sys.version_info[:2], VERL_CONFIG_NAME)).encode())
    _digest_files(digest, config_dir)
    return digest.hexdigest()[:32]


def _digest_files(digest, config_dir: Path) -> None:
    for file in sorted(p for p in config_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(file.relative_to(config_dir)).encode() + b"\0")
        digest.update(file.read_bytes() + b"\0")


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def cached_json(name: str, seed: str, files: Iterable[Path], build: Callable[[], Any]) -> Any:
    """``build()``'s JSON answer kept in :func:`cache_dir` as ``<name>-<digest>.json``: the digest is
    of ``seed`` and the path, size and modification time of each of ``files`` (an edited source file
    gives another name, so a stale answer is never read). A missing or unreadable file is built and
    written again (whole or not at all)."""
    digest = hashlib.sha256(seed.encode())
    for file in files:
        stat = file.stat()
        digest.update(f"{file}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    path = cache_dir() / f"{name}-{digest.hexdigest()[:32]}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    out = build()
    _write_atomic(path, json.dumps(out, sort_keys=True).encode())
    return out


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (two commands at once each write a complete file)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only home: the next command composes again
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        logging.getLogger(__name__).debug("verl defaults not cached at %s: %s", path, exc)


def apply_overrides(overrides: list[str]) -> DictConfig:
    """verl's config with ``overrides`` applied to a copy of :func:`verl_base`.

    The same result as :func:`compose_verl` for overrides of values (the kit never switches verl's
    config groups) at a fraction of the cost: Hydra's own parser and override step run
    (:mod:`grpokit.config.override_step`), the defaults list is not rebuilt, and the copy is an
    unpickling, not a deep copy. This is what makes validating hundreds of points before a
    submission quick. ``tests/unit/test_config_points.py`` checks both paths agree.

    Raises:
        hydra.errors.ConfigCompositionException: as :func:`compose_verl`.
    """
    from grpokit.config import override_step

    cfg = _verl_template(active()).copy()
    override_step.apply(cfg, overrides)
    return cfg


@functools.lru_cache(maxsize=4)
def _verl_template(ref: VerlConfigRef):
    from grpokit.config.override_step import Template

    return Template(base_of(ref))

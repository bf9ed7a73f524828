"""verl's verdict on a point's config, kept on disk: a config verl's ``validate_config`` passed once
is not handed to verl again.

Importing verl for ``validate_config`` (torch, tensordict, ray, transformers: about 7 s of CPU) is
the largest fixed cost of a sweep command, and researchers check the same configs again and again:
a dry run and then the same command, ``resume=true``, a sweep sent again after one value was
fixed. When every point of a command has a recorded pass, the command validates without importing
verl (every other check still runs on every point).

The record is one file per *store key*, ``<cache dir>/verl_verdicts-<store key>.txt``
(:func:`grpokit.config.verl_schema.cache_dir`), one line per passing config: the SHA-256 (hex) of
the store key and the point's ``verl_overrides`` (:attr:`grpokit.config.point.PointSpec.verl_overrides`,
the overrides that turn verl's defaults into the point's verl config: the whole input of
``validate_config``) but for the three that name the run (:data:`NAME_KEYS`: every sweep and
point has its own). A pass is kept only when verl passed the config with those three hidden
(set to ``???``, which OmegaConf refuses to read): verl's verdict then does not depend on them.
(A read through ``oc.select`` with a default would see the default instead; verl 0.9.1 has such
reads only in the rollout's trace settings, which ``validate_config`` does not build.) The store
key digests what else the verdict depends on:

- verl's composed defaults (:func:`grpokit.config.verl_schema.defaults_key`: verl's, hydra-core's,
  omegaconf's and Python's versions and every file of verl's config folder);
- every ``.py`` file of the installed verl (path, size, modification time): the code that checks;
- this module's caller, ``grpokit/validate/verl_check.py`` (its bytes): how the kit calls verl;
- whether vLLM is importable here (verl checks a LoRA rank against it);
- for a point on another config than ``ppo_trainer`` (``spec.verl_entry``: Megatron's, a recipe's),
  that config's name, folder and files (:func:`entry_key`).

Only passes are kept, and only those during which verl opened no file other than Python modules
(an audit hook, :pep:`578`, counts them): a check that reads a model's files (a critic's tokenizer,
``critic.model.path``) depends on more than the config, and runs every time. A failure is never
kept: verl words it again. Two commands may append at once (one ``write`` per line, ``O_APPEND``);
an unwritable cache folder only means nothing is kept.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from grpokit.config.verl_schema import cache_dir, defaults_key, verl_config_dir

if TYPE_CHECKING:
    from grpokit.config.point import PointSpec

_MODULE_SUFFIXES = (".py", ".pyc", ".so")
#: verl keys that name a run (the kit sets them per point): hidden when verl checks, left out of the digest.
NAME_KEYS = ("trainer.project_name", "trainer.experiment_name", "trainer.default_local_dir")

#: Files opened while a :func:`watch` block is open in this process (None: no block open).
_opened: list[str] | None = None


@functools.lru_cache(maxsize=1)
def store_key() -> str:
    """Hex digest of what a verdict depends on besides the config (see the module docstring)."""
    digest = hashlib.sha256(defaults_key(verl_config_dir()).encode() + b"\0")
    verl_dir = verl_config_dir().parents[1]  # <site-packages>/verl (the config folder is verl/trainer/config)
    for root, dirs, files in os.walk(verl_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(root, name)
            stat = os.stat(path)
            digest.update(f"{os.path.relpath(path, verl_dir)}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    digest.update(Path(__file__).with_name("verl_check.py").read_bytes() + b"\0")
    digest.update(b"vllm" if importlib.util.find_spec("vllm") else b"-")
    return digest.hexdigest()[:32]


def _path() -> Path:
    return cache_dir() / f"verl_verdicts-{store_key()}.txt"


def _digest(spec: PointSpec) -> str:
    kept = [o for o in spec.verl_overrides if o.lstrip("+").split("=", 1)[0] not in NAME_KEYS]
    if spec.verl_entry:  # another config than ppo_trainer (Megatron's, a recipe's folder): its defaults' key
        kept = [entry_key(spec.verl_entry), *kept]
    return hashlib.sha256((store_key() + "\0" + "\n".join(kept)).encode()).hexdigest()


def entry_key(verl_entry: dict) -> str:
    """The config a point composes, for its verdict's digest: the config's name and folder, and the
    digest of that folder's files when it is a recipe's (an edited recipe YAML is checked again)."""
    from grpokit.config.verl_entry import Entry
    from grpokit.config.verl_schema import ref_key

    return f"entry:{ref_key(Entry.of(verl_entry).ref)}"


@functools.lru_cache(maxsize=1)
def _kept() -> frozenset[str]:
    try:
        return frozenset(_path().read_text().split())
    except (OSError, UnicodeDecodeError):
        return frozenset()


def passed(spec: PointSpec) -> bool:
    """Whether verl's ``validate_config`` passed this point's verl config before (read once per process)."""
    return _digest(spec) in _kept()


def record(spec: PointSpec) -> None:
    """Keep a pass of ``spec``'s verl config (see the module docstring for when a pass may be kept)."""
    try:
        path = _path()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, (_digest(spec) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # nothing kept: the next command asks verl again


@contextlib.contextmanager
def names_hidden(cfg: DictConfig) -> Iterator[None]:
    """Within the block, ``cfg``'s :data:`NAME_KEYS` are ``???`` (OmegaConf raises on reading one);
    their values (an interpolation stays one) are put back on exit."""
    saved = []
    try:
        for key in NAME_KEYS:
            parent_key, leaf = key.rsplit(".", 1)
            parent = OmegaConf.select(cfg, parent_key)
            if not OmegaConf.is_dict(parent) or leaf not in parent:
                continue  # a config without it: nothing to hide
            raw = OmegaConf.to_container(OmegaConf.masked_copy(parent, leaf), resolve=False)[leaf]  # as written
            saved.append((parent, leaf, raw))
            parent[leaf] = "???"
        yield
    finally:
        for parent, leaf, value in reversed(saved):
            parent[leaf] = value


@contextlib.contextmanager
def watch() -> Iterator[list[str]]:
    """Within the block, the list of files opened in this process (Python modules left out)."""
    global _opened
    _install_hook()
    outer, _opened = _opened, []
    try:
        yield _opened
    finally:
        _opened = outer


@functools.cache
def _install_hook() -> None:
    sys.addaudithook(_on_event)  # for the life of the process (audit hooks cannot be removed)


def _on_event(event: str, args: tuple) -> None:
    if _opened is None or event != "open" or not args:
        return
    path = args[0]
    name = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)  # an fd: unknown file
    if not name.endswith(_MODULE_SUFFIXES):
        _opened.append(name)

"""Hydra's override step alone, on a config already composed: what makes large sweeps quick to validate.

Composing a config from its defaults list takes Hydra about a second for the kit's config (it holds
verl's complete one); a sweep point that differs from another only in values needs no new defaults
list, only Hydra's own override step (parse ``key=value``, then ``OmegaConf.update``) on a copy of
the composed config. This module is the one place the kit calls that step, which Hydra keeps private
(:func:`grpokit.config.hydra_internals.apply_overrides`); ``tests/unit/test_config_points.py``
checks the result equals Hydra's full composition.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import pickle
from collections.abc import Iterable, Mapping
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf

from grpokit.config import hydra_internals


@functools.cache
def _parser() -> OverridesParser:
    return OverridesParser.create()


@functools.lru_cache(maxsize=1 << 16)
def _parse_one(text: str) -> Override:
    return _parser().parse_overrides([text])[0]


def parse(overrides: Iterable[str]) -> list[Override]:
    """Hydra's parse of each override (grammar: hydra.cc's override grammar), cached per text.

    A sweep of N points repeats the same ``key=value`` texts N times; Hydra's parser takes about a
    millisecond per text. The parsed :class:`Override` objects are only read by the override step.

    Raises:
        hydra.errors.OverrideParseException: a text is not in Hydra's override grammar.
    """
    return [_parse_one(o) for o in overrides]


def apply(cfg: DictConfig, overrides: Iterable[str]) -> None:
    """Apply ``overrides`` (values, ``+key`` / ``++key`` / ``~key``; no config groups) to ``cfg`` in place.

    Raises:
        hydra.errors.ConfigCompositionException: a key ``cfg`` does not have ("Could not override
            'k'"), a ``+key`` that already exists, or a value of the wrong type, in Hydra's words.
    """
    hydra_internals.apply_overrides(cfg, parse(overrides))


class Template:
    """A composed config kept to be copied many times: pickled once, unpickled per copy.

    Unpickling an OmegaConf config is about five times quicker than ``copy.deepcopy`` of it, and
    gives an equal, independent config (flags, interpolations and the resolver cache included). A
    config that does not pickle (a node holding an arbitrary object) is deep-copied instead.
    """

    def __init__(self, cfg: DictConfig) -> None:
        self._cfg: DictConfig | None = None
        try:
            self._bytes: bytes | None = pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - any pickling failure: the slower exact copy
            self._bytes, self._cfg = None, copy.deepcopy(cfg)

    def copy(self) -> DictConfig:
        """An independent copy of the config given at construction (as it was then)."""
        if self._bytes is None:
            return copy.deepcopy(self._cfg)
        return pickle.loads(self._bytes)


def _by_key(overrides: Iterable[str]) -> dict[str, str] | None:
    """``{key: text}`` of value overrides; None when one is a deletion, a dict merge or a repeated key."""
    out: dict[str, str] = {}
    for text in overrides:
        parsed = _parse_one(text)
        if parsed.is_delete() or parsed.package is not None or isinstance(parsed.value(), dict):
            return None
        key = parsed.key_or_group
        if key in out:
            return None
        out[key] = text
    return out


def _as_update(text: str) -> str:
    """``+key=v`` on a config that already has ``key`` (the first point added it): ``++key=v``."""
    return "+" + text if text.startswith("+") and not text.startswith("++") else text


class Workspace:
    """One config, many points: a point's values applied in place, then the first point's put back.

    For a sweep whose points set the same keys (a grid), a point's config is the first point's
    with the values that differ applied; no copy of the whole config is made. ``point()`` yields
    that config and restores the first point's values afterwards, also when the caller raises, so
    the config is only valid inside the ``with`` block. With ``defaults`` (``{key: raw value}`` of
    the config the first point was composed on) a point may also leave out a key the first point
    sets, or set one it leaves out (verl's overrides name only the values that differ from verl's
    defaults). Points that differ in more than that (a deletion, a mapping merged into a node, a
    ``+key`` the first point does not add) get ``None`` from :meth:`delta`: the caller composes
    those another way.
    """

    def __init__(self, cfg: DictConfig, first: list[str], defaults: Mapping[str, Any] | None = None) -> None:
        """``cfg``: the first point's composed config (the workspace owns and mutates it)."""
        self.cfg = cfg
        self._first = _by_key(first)
        self._defaults = defaults or {}

    def delta(self, overrides: Iterable[str]) -> _Delta | None:
        """What to apply to the first point's config to get this point's, or None (see the class)."""
        mine = _by_key(overrides)
        first = self._first
        if mine is None or first is None:
            return None
        texts, resets, undo = [], [], []
        for key in mine.keys() | first.keys():
            text, was = mine.get(key), first.get(key)
            if text == was:
                continue
            if text is None or was is None:  # one side leaves verl's default: put the raw default in
                other = text or was
                if other.startswith("+") or key not in self._defaults or isinstance(self._defaults[key], dict):
                    return None
            elif text.startswith("+") != was.startswith("+") or text.startswith("++") != was.startswith("++"):
                return None
            if text is None:
                resets.append(key)
            else:
                texts.append(text)
            undo.append(key)
        return _Delta(texts, resets, undo)

    def point(self, delta: _Delta):
        """Context manager: ``self.cfg`` with ``delta`` (from :meth:`delta`) applied, restored on exit.

        Raises:
            hydra.errors.ConfigCompositionException: a value of ``delta`` does not fit its key
                (the first point's values are back in place when it propagates).
        """
        return _Applied(self, delta)

    def _set(self, keys: Iterable[str]) -> None:
        """Put verl's raw default (an interpolation stays one) back at each key."""
        for key in keys:
            OmegaConf.update(self.cfg, key, self._defaults[key], merge=False)


@dataclasses.dataclass
class _Delta:
    texts: list[str]  # overrides to apply
    resets: list[str]  # keys back to their default
    undo: list[str]  # keys whose first-point value is put back afterwards


class _Applied:
    def __init__(self, ws: Workspace, delta: _Delta) -> None:
        self._ws, self._delta = ws, delta

    def __enter__(self) -> DictConfig:
        try:
            apply(self._ws.cfg, [_as_update(t) for t in self._delta.texts])
            self._ws._set(self._delta.resets)
        except BaseException:
            self._restore()
            raise
        return self._ws.cfg

    def __exit__(self, *exc) -> None:
        self._restore()

    def _restore(self) -> None:
        first = self._ws._first
        assert first is not None
        apply(self._ws.cfg, [_as_update(first[k]) for k in self._delta.undo if k in first])
        self._ws._set(k for k in self._delta.undo if k not in first)


@contextlib.contextmanager
def cached_interpolation_parsing(maxsize: int = 4096):
    """Within the block, OmegaConf parses each distinct interpolation text once.

    OmegaConf (2.3) runs its ANTLR grammar on every ``${...}`` text each time it resolves it; verl's
    config has dozens of such texts and every sweep point resolves the same ones again (about
    half of the time verl's ``validate_config`` takes per point). The parse tree of a text does not
    depend on the config it is resolved in, so the block memoises OmegaConf's parse function
    (:func:`grpokit.config.hydra_internals.memoised_interpolation_parse`); the original is back on exit.
    """
    with hydra_internals.memoised_interpolation_parse(maxsize):
        yield

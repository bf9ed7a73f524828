"""Plan: a sweep's points from Hydra's job overrides (the first composed fully, the others from it).

The first stage of the sweep command (grpokit.submit.stages: plan -> validate -> claim -> submit).
"""

from __future__ import annotations

import contextlib
import re

from omegaconf import DictConfig

from grpokit.config.override_step import cached_interpolation_parsing
from grpokit.config.point import PointSpec, build_point
from grpokit.paths import config_groups
from grpokit.validate import Problem, SweepValidationError


def _parse(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def swept_keys(job_overrides: list[list[str]]) -> list[str]:
    """Keys whose value differs between points, in command-line order."""
    values: dict[str, set[str]] = {}
    order: list[str] = []
    for overrides in job_overrides:
        for o in overrides:
            k, v = _parse(o)
            if k not in values:
                values[k] = set()
                order.append(k)
            values[k].add(v)
    return [k for k in order if len(values[k]) > 1]


def build_points(
    config: DictConfig,
    load,
    job_overrides: list[list[str]],
    first_index: int = 0,
    name: str | None = None,
    on_point=None,
) -> list[PointSpec]:
    """One :class:`PointSpec` per point; ``load`` composes a point's kit config (:class:`PointLoader`,
    or any ``load(overrides) -> DictConfig``); ``name``: the sweep's name, set on every point;
    ``on_point(spec)``: called with each point as soon as it is built (the sweep hands it to the
    forked validator, :func:`grpokit.validate.overlap.feed`).

    Raises:
        SweepValidationError: a point does not compose (a value that does not fit its key), named.
    """
    keys = swept_keys(job_overrides)
    specs = []
    with cached_interpolation_parsing():  # every point resolves the same ${...} texts of verl's config
        for i, overrides in enumerate(job_overrides):
            specs.append(_build(load, overrides, first_index + i, keys, name))
            if on_point is not None:
                on_point(specs[-1])
    return specs


def _build(load, overrides: list[str], index: int, keys: list[str], name: str | None) -> PointSpec:
    from hydra.errors import HydraException

    point = load.point(overrides) if isinstance(load, PointLoader) else contextlib.nullcontext(None)
    try:
        with point as cfg:
            cfg = load(overrides) if cfg is None else cfg
            if name is not None:  # run folders and checkpoints follow the claimed folder's name
                cfg.sweep_name = name
            swept = dict(_parse(o) for o in overrides if _parse(o)[0] in keys)
            return build_point(cfg, index=index, kit_overrides=overrides, swept=swept)
    except HydraException as exc:  # Hydra's override step refused one of this point's values
        text = str(exc).splitlines()[0]
        named = re.search(r"'([^']+)'", text)
        key = named.group(1) if named else ", ".join(f"{k}={v}" for k, v in map(_parse, overrides) if k in keys)
        fix = "give the key a value of its type, or check its name (grpokit sweep --help)"
        raise SweepValidationError([Problem(f"point {index}", key, text, fix)]) from None


class PointLoader:
    """Composes a sweep's points: the first fully (Hydra's defaults list), the others from it.

    A point that differs from the first only in values (not in config groups such as
    ``experiment=``, nor in ``hydra.*``) is the first point's config with its own values applied
    by Hydra's override step (:mod:`grpokit.config.override_step`); composing the whole defaults
    list again per point (about a second each: the kit's config holds verl's complete one) made
    validation of large sweeps slow. ``tests/unit/test_config_points.py`` checks both give equal configs.

    ``loader(overrides)`` returns a new, independent config; ``with loader.point(overrides) as cfg``
    gives one valid inside the block only, without copying the whole config (what the sweep uses).

    Raises:
        hydra.errors.ConfigCompositionException: a point does not compose, in Hydra's words.
    """

    def __init__(self, full_load, first: list[str]) -> None:
        from grpokit.config import override_step

        self._full_load = full_load
        self._first = set(first)
        self._groups = config_groups()
        composed = full_load(first)
        self._template = override_step.Template(composed)
        self._workspace = override_step.Workspace(composed, first)

    def _diff(self, overrides: list[str]) -> list[str] | None:
        """This point's overrides that differ from the first's, or None when one picks a config group."""
        from grpokit.config import override_step

        # `+key=v` of this point adds a key the first point added too: on its config it is a
        # force-add (`++`), as composing this point from scratch would have made it.
        diff = [
            "+" + o if o.startswith("+") and not o.startswith("++") else o for o in overrides if o not in self._first
        ]
        parsed = override_step.parse(diff)
        if any(o.key_or_group.split("/")[0] in self._groups or o.key_or_group.startswith("hydra") for o in parsed):
            return None
        return diff

    def __call__(self, overrides: list[str]) -> DictConfig:
        from grpokit.config import override_step

        diff = self._diff(overrides)
        if diff is None:
            return self._full_load(overrides)
        cfg = self._template.copy()
        override_step.apply(cfg, diff)
        return cfg

    @contextlib.contextmanager
    def point(self, overrides: list[str]):
        """The point's config, valid inside the ``with`` block (the first point's values are put back after)."""
        delta = self._workspace.delta(overrides) if self._diff(overrides) is not None else None
        if delta is None:  # another key set, a deletion or a config group: composed on its own
            yield self(overrides)
            return
        with self._workspace.point(delta) as cfg:
            yield cfg


def point_loader(full_load, first: list[str]) -> PointLoader:
    """``load(overrides) -> kit config`` that composes the first point fully and derives the others."""
    return PointLoader(full_load, first)

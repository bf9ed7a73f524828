"""Which points of a sweep hold one value of a swept key, before Hydra has made the points.

The command-line check (:mod:`grpokit.validate.command_line`) runs before Hydra expands the sweep;
a bad value of a swept key (``verl.data.train_batch_size=8,eight,16``) is in some points only, and
its problem names those points as the later stages do (``001_train_batch_size-eight``). The points
are numbered as Hydra's basic sweeper (the kit's ``hydra/sweeper=grpokit``) makes them: one
dimension per key, in command-line order (a key typed twice keeps its first place, its last
values), the cartesian product with the last dimension varying fastest; the name is
:func:`grpokit.config.point.point_name` of the index and the keys with more than one value.
"""

from __future__ import annotations

import itertools
import math

from grpokit.config.point import point_name

#: Above this many points the labels are not worked out (the problem names all points).
MAX_POINTS = 4096


def dimensions(overrides: list) -> list[tuple[str, list[str]]]:
    """``[(key, [value as text, ...])]`` of Hydra's parsed ``overrides``, as the basic sweeper
    orders them (``BasicSweeper.split_arguments``): a sweep's values, or the one value."""
    dims: dict[str, list[str]] = {}
    for o in overrides:
        key = o.get_key_element()
        dims[key] = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
    return list(dims.items())


def points_with(dims: list[tuple[str, list[str]]], key: str, value: str) -> list[str] | None:
    """Names of the points whose ``key`` takes ``value`` (as text), in index order; None when that
    is every point (a key with one value), none (the key is not a dimension, or typed again with
    other values), or the sweep has more than :data:`MAX_POINTS` points."""
    keys = [k for k, _ in dims]
    if key not in keys:
        return None
    d = keys.index(key)
    sizes = [len(values) for _, values in dims]
    if math.prod(sizes) > MAX_POINTS:
        return None
    swept = [i for i, (_, values) in enumerate(dims) if len(set(values)) > 1]
    names = []
    for index, combo in enumerate(itertools.product(*[range(size) for size in sizes])):
        if dims[d][1][combo[d]] == value:
            values = {dims[i][0].lstrip("+~"): dims[i][1][combo[i]] for i in swept}
            names.append(point_name(index, values))
    return names if 0 < len(names) < math.prod(sizes) else None

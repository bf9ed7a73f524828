"""The key check of the run folder's typed JSON records (``manifest.json``, ``halving.json``,
``status.json``), and the value checks their key tables use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

#: key -> (required, check of the value, what the value must be: the error's words)
Spec = dict[str, tuple[bool, Callable[[Any], bool], str]]


def checked_fields(
    data: Any,
    spec: Spec,
    source: Path | str,
    where: str,
    *,
    error: type[Exception],
    writer: str,
    optional_may_be_null: bool = False,
) -> dict[str, Any]:
    """``data``'s values by ``spec``: an optional key that is absent reads as None.

    Args:
        data: one decoded JSON object (or what stands in its place).
        spec: its keys (:data:`Spec`).
        source, where: the file and the object's path in it (``"points[3]."``), for the error.
        error: the record's error class; writer: who writes the file (``"the sweep command"``).
        optional_may_be_null: an optional key's ``null`` passes without its check.

    Raises:
        error: one line naming the file and the key: not an object, an unknown key (written by
            another version), a required key missing, or a value that fails its check.
    """
    if not isinstance(data, dict):
        raise error(f"{source}: {where.rstrip('.') or 'the file'} is not a JSON object")
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise error(
            f"{source}: unknown key {where}{unknown[0]} (known: {', '.join(spec)}); "
            "was it written by another grpokit version?"
        )
    out = {}
    for key, (required, check, what) in spec.items():
        if key not in data:
            if required:
                raise error(f"{source}: {where}{key} is missing; {writer} writes it")
            out[key] = None
            continue
        value = data[key]
        if not (optional_may_be_null and value is None and not required) and not check(value):
            raise error(f"{source}: {where}{key}={value!r} must be {what}")
        out[key] = value
    return out


# -- the value checks of the records' key tables ----------------------------------------------------
def is_int(v: Any) -> bool:
    """An integer that is not a bool (JSON's ``true`` is not a step)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """An int or a float that is not a bool."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def is_str(v: Any) -> bool:
    return isinstance(v, str)


def is_dict(v: Any) -> bool:
    return isinstance(v, dict)


def list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A JSON list whose every element passes ``check``."""
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


def optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``null`` or a value that passes ``check``."""
    return lambda v: v is None or check(v)

"""Each setting's documentation, read from its dataclass field: the comment lines right above the
field in the class that declares it (the convention of :mod:`grpokit.config.schema`), so the
settings' ``--help`` lines and ``docs/settings.md`` are the dataclasses' own words, written once.

A field declared by :func:`dataclasses.make_dataclass` (no source to read) takes its help from its
``metadata["help"]``, or from the class named by the dataclass's ``_help_from`` attribute.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import typing
from typing import Any


@functools.cache
def field_help(cls: type) -> dict[str, str]:
    """``{field name: its help}`` for every field of the dataclass ``cls`` (inherited ones included;
    ``""`` where the field has no comment). The comment lines are joined with spaces, ``# `` dropped.

    Raises:
        TypeError: ``cls`` is not a dataclass.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a subclass's comment wins over its base's
        if "__dataclass_fields__" in vars(klass):
            found.update({k: v for k, v in _declared(klass).items() if v})
    source = getattr(cls, "_help_from", None)
    borrowed = field_help(source) if source is not None else {}
    return {
        f.name: found.get(f.name) or f.metadata.get("help") or borrowed.get(f.name, "") for f in dataclasses.fields(cls)
    }


def _declared(klass: type) -> dict[str, str]:
    """The comment block above each field declared in ``klass``'s own body (its source)."""
    try:
        lines, _ = inspect.getsourcelines(klass)
    except (OSError, TypeError):  # made by make_dataclass, or no source file
        return {}
    lines = textwrap.dedent("".join(lines)).splitlines()
    tree = ast.parse("\n".join(lines))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out = {}
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = _comment_above(lines, node.lineno - 1)
    return out


def _comment_above(lines: list[str], index: int) -> str:
    """The ``#`` lines right above ``lines[index]`` (no blank line between), as one line of text."""
    block = []
    i = index - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        block.append(lines[i].strip().lstrip("#").strip().removeprefix("--- ").strip())
        i -= 1
    return " ".join(reversed([b for b in block if b]))


def type_name(cls: type, name: str) -> str:
    """The field's type as written for a user: ``int``, ``str | None``, ``list[str]``, ``any``."""
    hints = typing.get_type_hints(cls)
    hint = hints.get(name, Any)
    if hint is Any:
        return "any"
    text = str(hint) if typing.get_origin(hint) else getattr(hint, "__name__", str(hint))
    return text.replace("typing.", "").replace("NoneType", "None").replace("grpokit.config.schema.", "")


def default_of(field: dataclasses.Field) -> Any:
    """The field's default value (a factory's product; a dataclass as its mapping)."""
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return field.default

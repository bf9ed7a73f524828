"""The type verl declares for each of its keys, read from verl's own config dataclasses.

verl's YAML names the dataclass of most sections (``_target_: verl.workers.config.RolloutConfig``);
that class's field annotations (``top_p: float``, ``ppo_micro_batch_size: Optional[int]``) are what
verl means a key to hold. A YAML default's Python type is not: ``entropy_coeff: 0`` is an int in
YAML and a ``float`` in ``ActorConfig``. The annotations are read from the installed verl's source
with :mod:`ast` (no import of verl, which costs seconds), following base classes by name through
the files of the dataclasses' packages. Kept on disk per installed verl (as verl's defaults are).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

#: What an annotation lets a key hold: ``int``, ``float``, ``bool``, ``str``, ``none``, ``list``,
#: ``dict``; ``any`` for anything else (``Any``, a nested config class, a type the kit cannot read).
_NAMES = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "None": "none",
    "NoneType": "none",
    "list": "list",
    "List": "list",
    "tuple": "list",
    "Tuple": "list",
    "ListConfig": "list",
    "dict": "dict",
    "Dict": "dict",
    "DictConfig": "dict",
}


def kinds(annotation: str) -> frozenset[str]:
    """What values an annotation (its source text) allows, as :data:`_NAMES`' words.

    ``"Optional[int]"`` -> {int, none}; ``"float | None"`` -> {float, none}; ``"Any"`` -> {any}.
    """
    try:
        node = ast.parse(annotation.strip("'\""), mode="eval").body
    except SyntaxError:
        return frozenset({"any"})
    return frozenset(_kinds(node))


def _kinds(node: ast.AST) -> set[str]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _kinds(node.left) | _kinds(node.right)
    if isinstance(node, ast.Constant) and node.value is None:
        return {"none"}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return kinds(node.value)
    if isinstance(node, ast.Subscript):
        outer = _name(node.value)
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer == "Optional":
            return _kinds(inner[0]) | {"none"}
        if outer == "Union":
            return set().union(*(_kinds(i) for i in inner))
        if outer == "Literal":
            values = [i.value for i in inner if isinstance(i, ast.Constant)]
            return {type(v).__name__ if v is not None else "none" for v in values} & set(_NAMES.values()) or {"any"}
        return {_NAMES.get(outer, "any")}
    return {_NAMES.get(_name(node), "any")}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _module_files(module: str) -> list[Path]:
    """The source files of ``module`` (``verl.x.y``): the file, or every ``.py`` of a package's folder.

    Found below the installed verl's folder, not with ``importlib.util.find_spec``, which would
    import verl's ``__init__`` (torch) to find a submodule.
    """
    from grpokit.config.verl_schema import verl_config_dir

    root = verl_config_dir().parent.parent  # .../site-packages/verl
    path = root.joinpath(*module.split(".")[1:])
    if path.is_dir():
        return sorted(path.glob("*.py"))
    file = path.with_suffix(".py")
    return [file] if file.is_file() else []


def _targets(node: Any, prefix: str, out: dict[str, list[str]]) -> None:
    """``{target class: [section keys]}`` of every mapping of verl's defaults with a ``_target_``."""
    if not isinstance(node, dict):
        return
    target = node.get("_target_")
    if isinstance(target, str) and target.startswith("verl."):
        out.setdefault(target, []).append(prefix[:-1])
    for key, child in node.items():
        _targets(child, f"{prefix}{key}.", out)


def _classes(files: list[Path]) -> dict[str, ast.ClassDef]:
    """Every class defined in ``files``, by name (the first definition of a name wins)."""
    out: dict[str, ast.ClassDef] = {}
    for file in files:
        try:
            tree = ast.parse(file.read_text())
        except (OSError, SyntaxError):
            continue
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                out.setdefault(stmt.name, stmt)
    return out


def _fields(name: str, classes: dict[str, ast.ClassDef], seen: frozenset[str] = frozenset()) -> dict[str, str]:
    """``{field: annotation text}`` of class ``name`` and its bases (a subclass's annotation wins)."""
    cls = classes.get(name)
    if cls is None or name in seen:
        return {}
    fields: dict[str, str] = {}
    for base in cls.bases:
        fields.update(_fields(_name(base), classes, seen | {name}))
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        outer = stmt.annotation.value if isinstance(stmt.annotation, ast.Subscript) else stmt.annotation
        if _name(outer) != "ClassVar":
            fields[stmt.target.id] = ast.unparse(stmt.annotation)
    return fields


def read_declared(base: DictConfig) -> dict[str, str]:
    """``{verl key: annotation text}`` for every key of ``base`` (verl's defaults) that a verl
    dataclass declares (the section's ``_target_`` class or one of its bases), and every field such
    a class declares that the YAML leaves out (``fsdp_config.mixed_precision``: verl reads a ``+`` value)."""
    tree = OmegaConf.to_container(base, resolve=False)
    targets: dict[str, list[str]] = {}
    _targets(tree, "", targets)
    files = sorted({f for t in targets for f in _module_files(t.rpartition(".")[0])})
    classes = _classes(files)
    out: dict[str, str] = {}
    for target, sections in targets.items():
        fields = _fields(target.rpartition(".")[2], classes)
        for section in sections:
            node = OmegaConf.select(base, section, throw_on_resolution_failure=False) if section else base
            names = [str(k) for k in node.keys()] if OmegaConf.is_dict(node) else []  # noqa: SIM118
            if not names:
                continue
            for key in dict.fromkeys([*names, *fields]):  # a field verl's YAML leaves out is read all the same
                if key in fields and key != "_target_":
                    out[f"{section}.{key}" if section else key] = fields[key]
    return out


def declared() -> dict[str, str]:
    """:func:`read_declared` of the installed verl for the active config
    (:func:`grpokit.config.verl_schema.active`: Megatron's sections are declared by Megatron's classes),
    kept in the kit's cache folder.

    The file's name digests the config's defaults key (:func:`grpokit.config.verl_schema.ref_key`) and
    the path, size and time of every source file the annotations are read from (an edited dataclass
    gives another name).
    """
    from grpokit.config.verl_schema import active

    return _declared_of(active())


@functools.lru_cache(maxsize=4)
def _declared_of(ref) -> dict[str, str]:
    from grpokit.config.verl_schema import base_of, cached_json, ref_key, verl_config_dir

    verl_dir = verl_config_dir().parent.parent
    files = [
        f
        for folder in ("workers/config", "trainer/config", "utils/profiler")
        for f in sorted((verl_dir / folder).glob("*.py"))
    ]
    seed = ref_key(ref) + ":with-fields-absent-from-yaml"
    return cached_json("verl_types", seed, files, lambda: read_declared(base_of(ref)))


declared.cache_clear = _declared_of.cache_clear  # type: ignore[attr-defined]


def declared_kinds(key: str) -> frozenset[str] | None:
    """What verl's dataclass lets ``key`` (a verl key, no ``verl.``) hold; None: no declaration."""
    text = declared().get(key)
    return None if text is None else kinds(text)

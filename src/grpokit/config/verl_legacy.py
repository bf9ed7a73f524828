"""verl's legacy reward keys and the keys verl reads instead, derived from the installed verl's code.

verl 0.9.1 moved its reward settings under ``reward.*`` (``reward.reward_manager.name``,
``reward.reward_model.*``, ``reward.custom_reward_function.*``, ``reward.sandbox_fusion.*``) and
kept the old sections (``reward_model.*``, ``custom_reward_function.*``, ``sandbox_fusion.*``) in
``ppo_trainer.yaml``, all null. Only its fully-async entry point
(``verl/experimental/fully_async_policy/fully_async_main.py``) translates them, with
``migrate_legacy_reward_impl`` (``verl/experimental/reward_loop/reward_loop.py``); ``main_ppo`` (what
the kit runs) reads none of them. A script that sets ``reward_model.reward_manager=dapo`` composes,
passes ``validate_config`` and trains with the default reward manager.

:func:`table` is that function's own answer: its source is read with :mod:`ast` (no import of verl,
which pulls in Ray and torch), run on verl's composed legacy and ``reward`` sections with a marker
value in every legacy key, and each marker found where the function put it. The sections it deletes
at the end are the legacy sections. Kept on disk per installed verl (:func:`cached_json`).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf, open_dict

#: verl's translation: (its file below verl's package folder, its name, the entry point that calls it).
MIGRATION = (
    "experimental/reward_loop/reward_loop.py",
    "migrate_legacy_reward_impl",
    "verl.experimental.fully_async_policy.fully_async_main",
)
#: The section the translation writes to.
TARGET = "reward"


def source_file() -> Path:
    """The installed verl's file that holds :data:`MIGRATION`'s function (not imported)."""
    from grpokit.config.verl_schema import verl_config_dir

    return verl_config_dir().parent.parent / MIGRATION[0]


def _function(tree: ast.Module) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == MIGRATION[1]:
            return node
    raise LookupError(f"{MIGRATION[1]} not found in verl's {MIGRATION[0]}")


def _deleted_sections(fn: ast.FunctionDef) -> list[str]:
    """``del config.<section>`` of the function: the legacy sections it removes once translated."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Delete):
            out += [t.attr for t in node.targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)]
    return out


def _read_keys(fn: ast.FunctionDef, sections: list[str]) -> list[str]:
    """``config.<section>.get("<name>")`` with a literal name: keys the function reads that verl's YAML may lack."""
    out = []
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr in sections
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.append(f"{node.func.value.attr}.{node.args[0].value}")
    return out


def _marker(i: int) -> str:
    return f"@@grpokit-legacy-{i}@@"


def read_table() -> dict[str, str]:
    """``{legacy key: the key verl reads instead}`` (``""``: read nowhere), leaves and whole sections.

    A section maps when every legacy leaf below it lands below one target with the same suffix
    (``reward_model.rollout`` -> ``reward.reward_model.rollout``), so a key below it that verl's YAML
    lacks (``+reward_model.rollout.engine_kwargs.vllm.x``) maps too.

    Raises:
        LookupError: the installed verl has no such function (the check is then skipped by the caller).
    """
    from grpokit.config.overrides import raw_leaves
    from grpokit.config.verl_schema import verl_base

    fn = _function(ast.parse(source_file().read_text()))
    sections = _deleted_sections(fn)
    base = verl_base()
    cfg = OmegaConf.create({s: OmegaConf.to_container(base[s], resolve=False) for s in [*sections, TARGET]})
    legacy = [k for s in sections for k in (f"{s}.{leaf}" for leaf in raw_leaves(cfg[s]))]
    legacy += [k for k in _read_keys(fn, sections) if k not in legacy]
    markers = {}
    for i, key in enumerate(legacy):
        OmegaConf.update(cfg, key, _marker(i), force_add=True)
        markers[_marker(i)] = key
    migrate = _callable(fn)
    with open_dict(cfg):
        migrate(cfg)
    landed = {}
    for key, value in raw_leaves(cfg[TARGET]).items():
        if isinstance(value, str) and value in markers:
            landed[markers[value]] = f"{TARGET}.{key}"
    table = {k: landed.get(k, "") for k in legacy}
    table.update(_sections(table, sections))
    return table


def _callable(fn: ast.FunctionDef):
    """verl's function, compiled from its source with the one name it uses (``open_dict``); verl's own
    module when the source needs more."""
    namespace: dict[str, Any] = {"open_dict": open_dict}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(source_file()), "exec"), namespace)  # noqa: S102
    compiled = namespace[fn.name]

    def run(cfg):
        try:
            return compiled(cfg)
        except NameError:  # a newer verl's function uses more of its module: import it (seconds)
            import importlib

            module = importlib.import_module("verl." + MIGRATION[0].removesuffix(".py").replace("/", "."))
            return getattr(module, fn.name)(cfg)

    return run


def _sections(table: dict[str, str], sections: list[str]) -> dict[str, str]:
    out = {}
    prefixes = {".".join(k.split(".")[:i]) for k in table for i in range(1, k.count(".") + 1)}
    for prefix in sorted(prefixes):
        below = {k[len(prefix) + 1 :]: v for k, v in table.items() if k.startswith(prefix + ".")}
        targets = {v[: -len(suffix) - 1] if v.endswith("." + suffix) else None for suffix, v in below.items()}
        if len(targets) == 1 and None not in targets:
            out[prefix] = targets.pop()
    return out


@functools.lru_cache(maxsize=1)
def table() -> dict[str, str]:
    """:func:`read_table`, kept in the kit's cache folder per installed verl ({} when verl has no
    such function)."""
    from grpokit.config.verl_schema import _version, cached_json

    try:
        file = source_file()
        if not file.is_file():
            return {}
        return cached_json("verl_legacy", _version("verl"), [file], read_table)
    except LookupError:
        return {}


@functools.lru_cache(maxsize=1)
def sections() -> tuple[str, ...]:
    """The legacy sections (``reward_model``, ``custom_reward_function``, ``sandbox_fusion``)."""
    return tuple(sorted({k.split(".", 1)[0] for k in table()}))


def legacy(key: str) -> bool:
    """``key`` (verl's name, no ``verl.``) is in one of verl's legacy reward sections."""
    return key.split(".", 1)[0] in sections()


def translate(key: str) -> str | None:
    """The key verl reads for legacy ``key`` (its longest mapped section or itself); ``""``: read
    nowhere; None: ``key`` is not legacy."""
    if not legacy(key):
        return None
    mapping = table()
    parts = key.split(".")
    for i in range(len(parts), 0, -1):
        old = ".".join(parts[:i])
        if old in mapping:
            new = mapping[old]
            return ".".join([new, *parts[i:]]) if new else ""
    return ""

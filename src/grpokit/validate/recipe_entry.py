"""What the kit needs of a recipe's entry (``verl_script=`` with ``python -m recipe.<name>.<main>``), refused
before submission with the reason, one :class:`~grpokit.problems.Problem` each (issue 34, item 5).

(A recipe config that does not extend verl's ``ppo_trainer``, hence lacks the keys the kit's contract
writes, is refused earlier, when the script is read: :func:`grpokit.config.verl_entry.check_config`.)

- **The recipe's code against the installed verl** (not in rehearsal, which runs the kit's stand-in
  trainer, not the recipe's code): each ``from verl.<module> import <name>`` at the top of the entry
  module and of the recipe's own modules it imports (``from .dapo_ray_trainer import ...``) must name
  a module of the installed verl and a name defined at its top level, read from verl's source with
  :mod:`ast` (nothing is imported), and each of the recipe's own modules must be in its folder. A
  recipe written for another verl (verl-recipe follows verl's main branch) fails there at import on
  the node; here it is one line naming the import, the file and the fix.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
from pathlib import Path

from omegaconf import DictConfig

from grpokit.config.point import PointSpec
from grpokit.config.verl_entry import MAIN_PPO, Entry
from grpokit.problems import Problem


def check(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """The problems of ``spec``'s recipe entry (none for verl's ``main_ppo``); see the module docstring."""
    entry = Entry.of(spec.verl_entry)
    if entry.module == MAIN_PPO:
        return []
    if getattr(spec.runtime, "rehearsal", False):
        return []
    missing = missing_imports(entry.module, entry.pythonpath or "")
    if not missing:
        return []
    source, line, what = missing[0]
    version = _verl_version()
    return [
        Problem(
            spec.name,
            "verl_script",
            f"{entry.module} would fail at import on the node: {source}:{line} imports {what}, which verl "
            f"{version} (installed) does not have",
            f"use a checkout of the recipe written for verl {version} (recipe_root=<it>), or the verl it was "
            "written for in the job's environment",
        )
    ]


def _verl_version() -> str:
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _verl_dir() -> Path | None:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _module_file(root: Path, dotted: str) -> Path | None:
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _top_names(path: Path) -> frozenset[str] | None:
    """Names defined at the top level of ``path`` (defs, classes, assignments, imports); None: unreadable,
    or a ``from x import *`` / ``__getattr__`` (any name may exist)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in tree.body:
        for sub in [node, *(ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [])]:
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, ast.Assign):
                names.update(t.id for t in sub.targets if isinstance(t, ast.Name))
            elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                names.add(sub.target.id)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                if any(a.name == "*" for a in sub.names):
                    return None
                names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return None if "__getattr__" in names else frozenset(names)


def missing_imports(module: str, root: str) -> list[tuple[str, int, str]]:
    """``(file, line, "verl.x.y.name" or "recipe module .z")`` of each top-level import of the recipe's
    entry ``module`` (under ``root``) and of its own modules that the installed verl or the recipe's
    folder lacks, first found first; [] when every one is there (or verl is not installed here)."""
    verl = _verl_dir()
    entry_file = _module_file(Path(root), module)
    if verl is None or entry_file is None:
        return []
    out: list[tuple[str, int, str]] = []
    seen: set[Path] = set()
    todo = [(entry_file, module.rsplit(".", 1)[0])]
    while todo:
        path, package = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:  # the recipe's own module (from .dapo_ray_trainer import ...)
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                dotted = ".".join([*parts, *([node.module] if node.module else [])])
                own = _module_file(Path(root), dotted)
                if own is None:
                    out.append((str(path), node.lineno, f"the recipe's module {'.' * node.level}{node.module or ''}"))
                else:
                    todo.append((own, dotted if own.name == "__init__.py" else dotted.rsplit(".", 1)[0]))
                continue
            name = node.module or ""
            if name != "verl" and not name.startswith("verl."):
                continue
            target = _module_file(verl.parent, name)
            if target is None:
                out.append((str(path), node.lineno, f"the module {name}"))
                continue
            defined = _top_names(target)
            for alias in node.names:
                submodule = _module_file(verl.parent, f"{name}.{alias.name}")
                if defined is not None and alias.name not in defined and submodule is None:
                    out.append((str(path), node.lineno, f"{name}.{alias.name}"))
    return out

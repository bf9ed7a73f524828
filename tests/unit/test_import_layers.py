"""The package's layers: imports go downward only and no module imports itself back through others.

Read from the source (every ``import`` and ``from ... import``, at module level and inside
functions: a deferred import is still a dependency; and every ``python -m grpokit.x.y`` a module
starts, :func:`run_module_targets`), not by importing. Relative imports are refused. The layers, lowest first
(ARCHITECTURE.md draws them):

0. ``paths``, ``problems``, ``procs``, ``models``, ``rehearsal``: leaves (files, the Problem record,
   process trees, the smoke model, the rehearsal trainer)
1. ``config``, ``slurm``: the typed settings and composed points; every Slurm fact and command
2. ``run_folder``, ``validate``, ``serving``: the run-folder contract; checks before submission; `vllm serve`
3. ``runtime``, ``tasks``, ``reports``: the in-job driver; the workloads; tables and plots
4. ``evaluation``: merge, serve and compare; the chained job
5. ``submit``: sweeps, arrays, resubmission, halving, chains (it submits the chained job: ``-m``)
6. ``cli`` and the Hydra plugins: the commands
"""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

LAYERS = [
    {"paths", "problems", "procs", "models", "rehearsal"},
    {"config", "slurm"},
    {"run_folder", "validate", "serving"},
    {"runtime", "tasks", "reports"},
    {"evaluation"},
    {"submit"},
    {"cli", "hydra_plugins"},
]
LAYER_OF = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}

#: Module-level cycles left to break (each named with what breaks it); a new one fails the test.
KNOWN_CYCLES: list[set[str]] = []


def modules() -> dict[str, Path]:
    out = {}
    for path in [*(SRC / "grpokit").rglob("*.py"), *(SRC / "hydra_plugins").rglob("*.py")]:
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


#: ``-m grpokit.x.y`` (or ``-m hydra_plugins...``) inside a string: a process started on that module.
_DASH_M = re.compile(r"(?:^|\s)-m\s+((?:grpokit|hydra_plugins)(?:\.\w+)+)")


def _module_constants(tree: ast.Module) -> dict[str, str]:
    """The module's ``NAME = "text"`` assignments at top level (``JOB_MODULE = "grpokit..."``)."""
    out = {}
    for node in tree.body:
        value = getattr(node, "value", None)
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update({t.id: value.value for t in targets if isinstance(t, ast.Name) and isinstance(value.value, str)})
    return out


def run_module_targets(tree: ast.Module) -> list[str]:
    """The modules a file starts as processes: ``-m grpokit.x.y`` in a string literal (a docstring's
    usage line too), and an argv list or tuple whose ``"-m"`` is followed by a literal or a module-level
    constant naming the module (``[sys.executable, "-m", JOB_MODULE, ...]``)."""
    constants = _module_constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += _DASH_M.findall(node.value)
        elif isinstance(node, ast.List | ast.Tuple):
            for before, after in zip(node.elts, node.elts[1:], strict=False):
                if isinstance(before, ast.Constant) and before.value == "-m":
                    value = after.value if isinstance(after, ast.Constant) else constants.get(getattr(after, "id", ""))
                    if isinstance(value, str):
                        found.append(value)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the kit's modules it imports (``from pkg import sub`` counts as ``pkg.sub``), or
    starts as a process (``python -m pkg.mod``: :func:`run_module_targets`)."""
    mods = modules()
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                named = [a.name for a in node.names if f"{node.module}.{a.name}" not in mods]
                targets = subs + ([node.module] if named else [])
            graph[name].update(t for t in targets if t in mods and t != name)
        graph[name].update(t for t in run_module_targets(tree) if t in mods and t != name)
    return graph


def relative_imports(text: str, where: str) -> list[str]:
    """``<where>:<line>: from .x import ...`` for each relative import in the source ``text``."""
    return [
        f"{where}:{node.lineno}: from {'.' * node.level}{node.module or ''} import ..."
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]


def test_no_relative_imports():
    """``from . import x`` hides which package a module depends on (and this test reads names): use
    the absolute name."""
    assert relative_imports("import os\nfrom .. import a\nfrom .b import c\n", "m.py") == [
        "m.py:2: from .. import ...",
        "m.py:3: from .b import ...",
    ]
    found = [
        hit for path in modules().values() for hit in relative_imports(path.read_text(), str(path.relative_to(SRC)))
    ]
    assert not found, "relative imports (write the absolute grpokit.<package>.<module>):\n" + "\n".join(found)


def test_dash_m_module_strings_count_as_imports():
    """A process started on a module depends on it like an import: both forms are read."""
    tree = ast.parse(
        'JOB = "grpokit.evaluation.chained_job"\n'
        '"""usage: python -m grpokit.runtime.driver <point.json>"""\n'
        'argv = [sys.executable, "-m", JOB, "x"]\n'
        'cmd = ("python", "-m", "grpokit.rehearsal.rehearsal_trainer")\n'
    )
    assert sorted(run_module_targets(tree)) == [
        "grpokit.evaluation.chained_job",
        "grpokit.rehearsal.rehearsal_trainer",
        "grpokit.runtime.driver",
    ]


def package(module: str) -> str:
    parts = module.split(".")
    return parts[0] if parts[0] == "hydra_plugins" else (parts[1] if len(parts) > 1 else "grpokit")


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_every_import_goes_to_a_lower_layer_and_the_layers_found_are_printed(capsys):
    graph = import_graph()
    packages = {package(m) for m in modules()} - {"grpokit"}
    assert packages <= set(LAYER_OF), f"packages with no layer: {sorted(packages - set(LAYER_OF))}"
    upward = sorted(
        f"{a} -> {b}"
        for a, bs in graph.items()
        for b in bs
        if package(a) != package(b) and package(b) != "grpokit" and LAYER_OF[package(b)] >= LAYER_OF[package(a)]
    )
    # the layers the graph itself gives: a package's level is 1 + the highest level it imports
    deps: dict[str, set[str]] = collections.defaultdict(set)
    for a, bs in graph.items():
        deps[package(a)].update(package(b) for b in bs if package(b) not in (package(a), "grpokit"))
    level: dict[str, int] = {}

    def depth(p: str, seen: tuple[str, ...] = ()) -> int:
        if p not in level:
            level[p] = 1 + max((depth(q, (*seen, p)) for q in deps[p] if q not in seen), default=-1)
        return level[p]

    with capsys.disabled():
        print("\nimport layers found (package: level, imports):")
        for p in sorted(packages, key=lambda p: (depth(p), p)):
            print(f"  {depth(p)}  {p:<14} -> {', '.join(sorted(deps[p])) or '-'}")
    assert not upward, "imports that go up or sideways a layer:\n" + "\n".join(upward)


def test_no_package_and_no_module_imports_itself_back():
    graph = import_graph()
    packages: dict[str, set[str]] = collections.defaultdict(set)
    for a, bs in graph.items():
        packages[package(a)].update(package(b) for b in bs if package(b) != package(a))
    assert not cycles(packages), f"package cycles: {cycles(packages)}"
    new = [c for c in cycles(graph) if c not in KNOWN_CYCLES]
    assert not new, f"module cycles: {new}"


def test_the_drivers_decisions_import_no_process_and_no_driver():
    """Inside ``runtime``: ``runtime.decisions`` (verdicts from evidence) sits below the processes
    the driver starts (``runtime.processes``) and the driver itself; it imports only its own kind."""
    up = sorted(
        f"{name} -> {target}"
        for name, targets in import_graph().items()
        if name.startswith("grpokit.runtime.decisions")
        for target in targets
        if target.startswith("grpokit.runtime") and not target.startswith("grpokit.runtime.decisions")
    )
    print(
        "runtime.decisions imports:",
        sorted({t for n, ts in import_graph().items() if n.startswith("grpokit.runtime.decisions") for t in ts}),
    )
    assert up == [], up

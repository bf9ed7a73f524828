"""The installed versions, the declared ranges and the lock agree (README, "Installing").

What each check catches: an open-ended range on a library the kit calls (a fresh install takes last
night's major release: openai 3.x refused httpx's Timeout and the memory server died at start), an
environment pip itself finds broken, a lock that left pyproject.toml's ranges, `make test` run on an
environment that did not come from the lock, and the CPU lock drifting from the GPU bundle's set.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
FIRST_PARTY = {"grpokit", "hydra_plugins", "_shim"}  # _shim: launch/_shim.py, beside the launchers


def _lock_module():
    spec = importlib.util.spec_from_file_location("grpokit_constraints_lock", REPO / "constraints" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = _lock_module()


def declared() -> dict[str, list[Requirement]]:
    """``{normalised name: [requirements]}`` over the dependencies and every extra of pyproject.toml."""
    project = PYPROJECT["project"]
    found: dict[str, list[Requirement]] = {}
    for line in [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]:
        req = Requirement(line)
        found.setdefault(lock.normalise(req.name), []).append(req)
    return found


def has_upper_bound(req: Requirement) -> bool:
    return any(s.operator in {"<", "<=", "~=", "==", "==="} for s in req.specifier)


def imported_distributions() -> dict[str, str]:
    """``{normalised distribution: the module the kit imports}`` for src/ and launch/ (absolute imports)."""
    modules: set[str] = set()
    for path in [*(REPO / "src").rglob("*.py"), *(REPO / "launch").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    third_party = sorted(modules - set(sys.stdlib_module_names) - FIRST_PARTY)
    by_module = md.packages_distributions()
    # a module of an extra that is not installed here (modelscope on a login node) is its own distribution
    return {lock.normalise(d): m for m in third_party for d in by_module.get(m, [m])}


def test_pip_finds_no_broken_requirement():
    out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_library_the_kit_imports_is_declared_with_an_upper_bound():
    reqs = declared()
    missing = [f"{d} (import {m})" for d, m in imported_distributions().items() if d not in reqs]
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
    open_ended = [str(r) for d in imported_distributions() for r in reqs[d] if not has_upper_bound(r)]
    assert not open_ended, f"declared without an upper bound (a fresh install takes any new major): {open_ended}"


def test_every_declared_library_that_is_installed_is_inside_its_range():
    outside = []
    for name, reqs in declared().items():
        try:
            installed = Version(md.version(name))
        except md.PackageNotFoundError:
            continue  # an extra this environment did not install (train, hub)
        outside += [f"{name} {installed} not in {r}" for r in reqs if not r.specifier.contains(installed, True)]
    assert not outside, outside


def test_the_lock_pins_every_declared_library_inside_its_range():
    pins = lock.read_pins(lock.CPU_LOCK)
    problems = []
    for name, reqs in declared().items():
        if name in pins:
            problems += [f"{name}=={pins[name]} not in {r}" for r in reqs if not r.specifier.contains(pins[name], True)]
    base = {lock.normalise(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    problems += [f"{name} is a dependency but the lock does not pin it" for name in sorted(base - pins.keys())]
    assert not problems, problems


def test_the_cpu_lock_and_the_gpu_set_agree_or_say_why():
    cpu, gpu = lock.read_pins(lock.CPU_LOCK), lock.read_pins(lock.GPU_SET)
    unexplained = {n: v for n, v in lock.differences(cpu, gpu).items() if n not in lock.REASONS}
    assert not unexplained, f"CPU lock vs GPU set, no reason in constraints/lock.py REASONS: {unexplained}"
    stale = [n for n in lock.REASONS if n not in lock.differences(cpu, gpu) and not (n in cpu and n not in gpu)]
    assert not stale, f"REASONS explains differences that no longer exist: {stale}"
    # the written lock is what render() makes of its own pins: its header lists exactly these reasons
    assert lock.CPU_LOCK.read_text() == lock.render(cpu, gpu)


def test_a_difference_without_a_reason_is_refused_naming_the_package():
    with pytest.raises(ValueError, match=r"differ on openai \(openai 3\.63\.0 vs 3\.57\.0\).*REASONS"):
        lock.render({"openai": "3.63.0", "torch": "2.13.0"}, {"openai": "3.57.0"})


def test_a_line_that_is_not_a_pin_is_named_with_its_file_and_line(tmp_path):
    bad = tmp_path / "freeze.txt"
    bad.write_text("# comment\nray==2.60.0\nverl @ file:///src/verl\n")
    with pytest.raises(ValueError, match=r"freeze\.txt:3: not a 'name==version' pin"):
        lock.read_pins(bad)
    bad.write_text("Torch==2.13.0+cpu\nrank_bm25==0.2.2\n")
    assert lock.read_pins(bad) == {"torch": "2.13.0", "rank-bm25": "0.2.2"}


@pytest.mark.skipif(
    not os.environ.get("GRPOKIT_EXPECT_LOCK"),
    reason="GRPOKIT_EXPECT_LOCK unset: `make test` sets it to the lock `make install` installed from",
)
def test_make_test_runs_on_the_locked_versions():
    """`make test` installs from the lock: every locked package that is installed has its locked version."""
    pins = lock.read_pins(REPO / os.environ["GRPOKIT_EXPECT_LOCK"])
    off = []
    for name, version in pins.items():
        try:
            installed = md.version(name)
        except md.PackageNotFoundError:
            continue  # an extra this install did not ask for (hub)
        if Version(installed).public != Version(version).public:
            off.append(f"{name} {installed} (lock {version})")
    assert not off, f"installed versions differ from the lock: {off}"

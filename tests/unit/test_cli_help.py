"""Issue 37: ``grpokit --version``, ``grpokit --help`` describing each command, and every command's
``--help`` answered before torch, transformers, verl or Ray are imported (they cost 5-9 s)."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpokit.cli import COMMANDS, summary

REPO = Path(__file__).resolve().parents[2]
#: The console script installed beside this interpreter (``[project.scripts]``); PYTHONPATH points it at this tree.
GRPOKIT = str(Path(sys.executable).with_name("grpokit"))
HEAVY = ("torch", "transformers", "verl", "ray", "vllm")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _grpokit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([GRPOKIT, *args], env=_env(), capture_output=True, text=True, timeout=120)


def test_version_prints_the_installed_version():
    run = _grpokit("--version")
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.startswith(f"grpokit {importlib.metadata.version('grpokit')} (")
    assert str(REPO / "src" / "grpokit") in run.stdout  # which tree answered: a worktree or an install


def test_help_lists_every_command_with_its_docstrings_first_line():
    run = _grpokit("--help")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    for name, module in COMMANDS.items():
        row = [line for line in lines if line.split()[:1] == [name]]
        assert len(row) == 1, f"{name} not listed once in:\n{run.stdout}"
        assert row[0].split(None, 1)[1] == summary(module) != ""
    assert "--version" in lines[0]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_docstring_opens_with_a_one_line_summary(name):
    # PEP 257: a summary line, then a blank line; it is what `grpokit --help` shows for the command.
    source = (REPO / "src" / "grpokit" / "cli" / f"{COMMANDS[name]}.py").read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    first, *rest = doc.splitlines()
    assert first.endswith(".") and (not rest or rest[0] == ""), f"{name}: {first!r}"
    assert len(summary(COMMANDS[name])) <= 90, f"{name}: keep the summary to 90 characters"


_HELP_EACH = """
import contextlib, io, json, sys
from grpokit.cli import COMMANDS, main
HEAVY = {heavy!r}
main(["--help"])
report = {{"--help": sorted(m for m in HEAVY if m in sys.modules),
          "modules": sorted(m for m in sys.modules if m.startswith("grpokit.cli."))}}
for name in COMMANDS:
    before = {{m for m in HEAVY if m in sys.modules}}
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = main([name, "--help"])
    except SystemExit as exc:
        code = exc.code
    report[name] = {{"code": code, "usage": "usage" in out.getvalue().lower(),
                    "heavy": sorted(m for m in HEAVY if m in sys.modules and m not in before)}}
print(json.dumps(report), file=sys.__stderr__)
"""


def test_every_commands_help_imports_no_torch_transformers_verl_or_ray():
    # One interpreter runs `grpokit --help`, then `grpokit <command> --help` for each command in turn;
    # a heavy library that appears after a command's --help is that command's (sys.modules only grows).
    run = subprocess.run(
        [sys.executable, "-c", _HELP_EACH.format(heavy=HEAVY)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stderr.strip().splitlines()[-1])
    assert report["--help"] == [] and report["modules"] == [], "grpokit --help reads the sources, imports nothing"
    for name in COMMANDS:
        assert report[name]["code"] == 0 and report[name]["usage"], (name, report[name])
        assert report[name]["heavy"] == [], f"grpokit {name} --help imported {report[name]['heavy']}: parse first"

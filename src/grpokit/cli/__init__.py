"""The kit's commands, one module each; ``grpokit <command>`` (``[project.scripts]``) dispatches here.

    grpokit sweep -m cluster=slurm verl.data.train_batch_size=8,16
    grpokit status logs/gsm8k_grpo/sweep-1 --json
    grpokit --help        # each command with the first line of its module's docstring
    grpokit --version

``python launch/<command>.py`` runs the same module (``launch/`` holds one-line shims so the design
card's commands keep working from a checkout). Each module has ``entry(argv) -> int``, parses its
arguments before it imports torch, transformers, verl or Ray (``--help`` stays fast), and its
docstring's first line is the description ``grpokit --help`` shows (read from the source, not imported).
"""

from __future__ import annotations

import ast
import errno
import importlib
import importlib.util
import os
import sys

#: command name -> module under grpokit.cli (the name a user types; modules use underscores).
COMMANDS: dict[str, str] = {
    "sweep": "sweep",
    "run": "run",
    "status": "status",
    "report": "report",
    "resubmit": "resubmit",
    "logs": "logs",
    "cancel": "cancel",
    "merge": "merge",
    "serve-eval": "serve_eval",
    "prepare-data": "prepare_data",
    "download": "download",
    "make-tiny-model": "make_tiny_model",
}


def _usage() -> str:
    return "usage: grpokit <command> [args...]\ncommands: " + ", ".join(COMMANDS) + "\n(grpokit --help describes each)"


def summary(module: str) -> str:
    """The first line of ``grpokit.cli.<module>``'s docstring, read from its source without importing it
    (importing ``serve_eval`` loads verl); reST ``literals`` shown plain. "" when it has none."""
    spec = importlib.util.find_spec(f"grpokit.cli.{module}")
    source = spec.loader.get_source(spec.name) if spec and spec.loader else None  # type: ignore[attr-defined]
    doc = ast.get_docstring(ast.parse(source)) if source else None
    return (doc or "").strip().splitlines()[0].replace("``", "") if doc and doc.strip() else ""


def help_text() -> str:
    """``grpokit --help``: the usage line, then one line a command (name, description)."""
    width = max(map(len, COMMANDS)) + 2
    rows = [f"  {name:<{width}}{summary(module)}".rstrip() for name, module in COMMANDS.items()]
    return "\n".join(
        [
            "usage: grpokit <command> [args...]    grpokit <command> --help    grpokit --version",
            "",
            "commands:",
            *rows,
        ]
    )


def version() -> str:
    """``grpokit --version``: the installed distribution's version and where this package is imported from."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        number = dist_version("grpokit")
    except PackageNotFoundError:  # imported from a checkout without `pip install -e .`
        number = "unknown (not installed: pip install -e .)"
    return f"grpokit {number} ({os.path.dirname(os.path.dirname(__file__))})"


def main(argv: list[str] | None = None) -> int:
    """The ``grpokit`` console script. Exit status: the command's; 2 for an unknown command or none."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(help_text())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(version())
        return 0
    name, rest = args[0], args[1:]
    module = COMMANDS.get(name) or (name if name in COMMANDS.values() else None)
    if module is None:
        import difflib

        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        print(f"grpokit: unknown command '{name}'{hint}\n{_usage()}", file=sys.stderr)
        return 2
    sys.argv = [f"grpokit {name}", *rest]  # Hydra and argparse read the program name from here
    return _run(module, rest)


def shim(module: str) -> int:
    """``python launch/<module>.py ...``: the command with this process's arguments, as ``grpokit``
    runs it (a closed stdout included); the program name stays the script's."""
    return _run(module, sys.argv[1:])


def _run(module: str, argv: list[str]) -> int:
    try:
        code = importlib.import_module(f"grpokit.cli.{module}").entry(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        return _closed_stdout()
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT (128 + 2), no traceback
        print(f"\n{_interrupted(module)}", file=sys.stderr)
        return 130
    except OSError as exc:  # a full disk (ENOSPC, EDQUOT) no command caught itself: one line, no traceback
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror}{where}; free space there and run the same command again", file=sys.stderr)
        return 1
    return code


def _interrupted(module: str) -> str:
    """The line a Ctrl-C leaves: for ``sweep``, whether anything reached Slurm (or ran here)."""
    if module != "sweep":
        return "interrupted"
    sweep = sys.modules.get("grpokit.submit.stages")
    folder = getattr(sweep, "submitting_into", None)
    if folder is None:
        return "interrupted; nothing submitted"
    return f"interrupted while submitting; see what reached Slurm with: grpokit status {folder}"


def _closed_stdout() -> int:
    """The reader of stdout went away (``grpokit status --json | head``): no traceback, exit 141
    (128 + SIGPIPE, as a shell tool killed by the signal). Python's recipe (library/signal.html,
    "Note on SIGPIPE"): point stdout at devnull so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141

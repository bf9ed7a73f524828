"""The kit's commands, one module each; ``grpokit <command>`` (``[project.scripts]``) dispatches here.

    grpokit sweep -m cluster=slurm verl.data.train_batch_size=8,16
    grpokit status logs/gsm8k_grpo/sweep-1 --json

``python launch/<command>.py`` runs the same module (``launch/`` holds one-line shims so the design
card's commands keep working from a checkout). Each module has ``entry(argv) -> int``.
"""

from __future__ import annotations

import errno
import importlib
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
    return (
        "usage: grpokit <command> [args...]\ncommands: " + ", ".join(COMMANDS) + "\n(grpokit <command> --help for each)"
    )


def main(argv: list[str] | None = None) -> int:
    """The ``grpokit`` console script. Exit status: the command's; 2 for an unknown command."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
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

"""One owner per file name: no two modules of the package share a name, so a name in a traceback,
a log line or a review points at one file.

Two families repeat a name on purpose and are the only exceptions: ``cli/<command>.py`` is named
after the command it runs (``grpokit status`` is ``cli/status.py``), and every task under
``tasks/<task>/`` has the same parts (``data.py``, ``reward.py``)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _owner(path: Path) -> str | None:
    """The module's family when it is an allowed repeat, else None."""
    parts = path.relative_to(SRC / "grpokit").parts
    if parts[0] == "cli":
        return "cli"
    if parts[0] == "tasks" and len(parts) == 3:
        return f"tasks/{parts[1]}"
    return None


def test_no_two_modules_share_a_file_name():
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        if path.name != "__init__.py" and "__pycache__" not in path.parts:
            by_name[path.name].append(path)
    repeated = {}
    for name, paths in by_name.items():
        plain = [p for p in paths if (SRC / "grpokit") not in p.parents or _owner(p) is None]
        cli_or_task = [p for p in paths if p not in plain]
        # a plain module may not share its name with another plain module, nor with a command
        if len(plain) > 1 or (plain and any(_owner(p) == "cli" for p in cli_or_task)):
            repeated[name] = [str(p.relative_to(SRC)) for p in paths]
    assert repeated == {}, repeated

"""The errors a sweep point can have before submission, and how they are reported."""

from __future__ import annotations

import dataclasses
import sys

_SAID: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with one point: where (``point``, ``key``), what, and how to fix it."""

    point: str
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.point}] {self.key}: {self.message}; fix: {self.fix}"


class SweepValidationError(ValueError):
    """Raised before anything is submitted when at least one point has a problem."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        points = {p.point for p in problems} - {"all points"}
        where = "all points" if len(points) != len({p.point for p in problems}) else f"{len(points)} point(s)"
        lines = grouped_lines(problems)  # the count is of the lines printed: one per distinct problem
        head = f"{len(lines)} problem(s) in {where}; nothing was submitted:"
        super().__init__("\n".join([head, *lines]))


def grouped_lines(problems: list[Problem]) -> list[str]:
    """One line per distinct problem; the same problem in several points is one line naming them all."""
    order: dict[tuple[str, str, str], list[str]] = {}
    for p in problems:
        points = order.setdefault((p.key, p.message, p.fix), [])
        if p.point not in points:
            points.append(p.point)
    lines = []
    for (key, message, fix), points in order.items():
        where = ", ".join(points[:6]) + (f" and {len(points) - 6} more" if len(points) > 6 else "")
        lines.append(str(Problem(where, key, message, fix)))
    return lines


def note(text: str) -> None:
    """Print an informational line once per process (a check skipped or deferred), to stderr."""
    if text not in _SAID:
        _SAID.add(text)
        print(f"note: {text}", file=sys.stderr)

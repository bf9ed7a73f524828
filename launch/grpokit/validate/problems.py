"""The errors a sweep point can have before submission, and how they are reported."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with one point: where (``point``, ``key``), what, and how to fix it."""

    point: str
    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.point}] {self.key}: {self.message}\n    fix: {self.fix}"


class SweepValidationError(ValueError):
    """Raised before anything is submitted when at least one point has a problem."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        points = sorted({p.point for p in problems})
        head = f"{len(problems)} problem(s) in {len(points)} point(s); nothing was submitted:"
        super().__init__("\n".join([head, *map(str, problems)]))

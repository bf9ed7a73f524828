"""The verl releases the kit is tested with, and the refusal of a verl outside them.

One place states the range: :data:`TESTED` (``pyproject.toml`` declares ``verl`` with the same
specifier; ``tests/unit/test_verl_release.py`` checks they agree). CI validates against both ends
(0.8.0 from ``constraints/verl-lowest.txt``, 0.9.1 from the lock).

- A ``verl_script=`` run (verl's own trainer with the script's keys): :data:`TESTED`, 0.8.0 up to
  the next minor release 0.10 (a verl 0.10 may rename keys the kit sets).
- The packaged experiments (``gsm8k_grpo``, ``memalpha_grpo``, ...): :data:`EXPERIMENTS`, from
  0.9.0. Their requeue contract saves a checkpoint on demand before a preemption or the time limit
  through verl's v1 trainer (``verl.trainer.ppo.v1.trainer_base.PPOTrainer.on_step_begin``,
  :mod:`grpokit.runtime.processes.verl_hooks`), which verl 0.9.0 introduced (``trainer.use_v1``);
  verl 0.8 has neither. A ``verl_script=`` run on verl 0.8 resumes from its last ``save_freq``
  checkpoint instead.
"""

from __future__ import annotations

import re

from grpokit.problems import Problem

#: ``(lowest, first not tested)``: releases ``lowest <= v < first not tested`` (release numbers only).
TESTED = ((0, 8, 0), (0, 10))
EXPERIMENTS = ((0, 9, 0), (0, 10))
#: Why the packaged experiments need :data:`EXPERIMENTS` (said in the refusal).
EXPERIMENTS_WHY = (
    "the packaged experiments save a checkpoint on demand before a preemption through verl's v1 trainer "
    "(verl.trainer.ppo.v1, trainer.use_v1), which verl 0.9.0 introduced"
)


def release(version: str) -> tuple[int, ...] | None:
    """The release numbers of a PEP 440 version (``0.9.1.dev0+g1234`` -> ``(0, 9, 1)``); None when
    ``version`` starts with no number."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def _text(numbers: tuple[int, ...]) -> str:
    return ".".join(map(str, numbers))


def specifier(span: tuple[tuple[int, ...], tuple[int, ...]] = TESTED) -> str:
    """The range as a PEP 440 specifier (``>=0.8.0,<0.10``), as ``pyproject.toml`` writes it."""
    return f">={_text(span[0])},<{_text(span[1])}"


def within(version: str, span: tuple[tuple[int, ...], tuple[int, ...]] = TESTED) -> bool:
    """Whether ``version``'s release is in ``span``. A development or local build of a release
    (``0.9.2.dev0``, a fork's ``0.9.1+mylab``) counts as that release."""
    numbers = release(version)
    if numbers is None:
        return False
    pad = max(len(numbers), len(span[0]), len(span[1]))
    fill = lambda t: t + (0,) * (pad - len(t))  # noqa: E731 - 0.10 == 0.10.0
    return fill(span[0]) <= fill(numbers) < fill(span[1])


def check(version: str | None, where: str, packaged: bool, experiment: str = "") -> list[Problem]:
    """The refusal of a job's verl ``version`` (None: it has none) found at ``where`` (``verl X at
    <folder>, the job's Python <python>``); ``packaged``: the sweep runs a packaged experiment
    (``experiment``), else a ``verl_script=`` run. [] when it is in range."""
    if version is None:
        return [
            Problem(
                "all points",
                "cluster.python",
                f"{where} has no verl: the job runs verl's trainer",
                f"pip install 'verl{specifier()}' (or your verl checkout: pip install -e <checkout>) there",
            )
        ]
    if not within(version, TESTED):
        return [
            Problem(
                "all points",
                "cluster.python",
                f"verl {version} ({where}) is outside the releases the kit is tested with, verl{specifier()}: "
                "the kit sets and reads keys of those releases' config",
                f"install a verl in {specifier()} in the job's environment (or base your fork on one), "
                "or point cluster.python at an environment that has one",
            )
        ]
    if packaged and not within(version, EXPERIMENTS):
        return [
            Problem(
                "all points",
                "experiment",
                f"experiment {experiment} needs verl{specifier(EXPERIMENTS)}; {where} has verl {version}: "
                f"{EXPERIMENTS_WHY}",
                f"install verl{specifier(EXPERIMENTS)} in the job's environment, or run your own verl script "
                f"(verl_script=<file>: verl{specifier()})",
            )
        ]
    return []

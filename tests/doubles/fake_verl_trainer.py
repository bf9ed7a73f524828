"""TEST DOUBLE of ``python -m verl.trainer.main_ppo``: the kit's rehearsal trainer,
:mod:`grpokit.rehearsal.rehearsal_trainer` (its docstring lists the contracts of verl it follows and the
``FAKE_TRAINER_*`` knobs the tests use). Run as a script by the tests' ``runtime.trainer_cmd``."""

import sys

from grpokit.rehearsal.rehearsal_trainer import *  # noqa: F403 - the tests call its functions (save, real_weights, ...)
from grpokit.rehearsal.rehearsal_trainer import main

if __name__ == "__main__":
    sys.exit(main())

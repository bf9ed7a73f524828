"""The driver's decisions: pure verdicts from evidence (what happened, the metrics, the checkpoint
files, Slurm's answers) -> an outcome, a stop, a retry, the checkpoint to resume from.

Nothing here starts a process or asks Slurm; every module is unit-tested in seconds
(tests/unit/test_import_layers.py checks that nothing here imports ``runtime.processes`` or the driver).
"""

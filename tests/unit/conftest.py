"""Fixtures of the unit tests that compose one point of the kit's config."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def base(tiny_model_dir: Path, gsm8k_dir: Path, tmp_path: Path) -> list[str]:
    """Overrides of one composable point: the tiny model, real GSM8K, logs under ``tmp_path``."""
    return [
        "model=tiny",
        f"model.path={tiny_model_dir}",
        f"experiment.data_dir={gsm8k_dir}",
        f"logs_root={tmp_path / 'logs'}",
        "sweep_name=unit",
    ]

"""Fixtures shared by the unit and integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default random-weight smoke model (`launch/make_tiny_model.py`), built once a session."""
    from grpokit.models import build_model

    return build_model(tmp_path_factory.mktemp("tiny_model") / "tiny", like="tiny", seed=0)

"""Models the kit builds itself: random-weight smoke models (`grpokit.models.tiny`).

The names below load from :mod:`grpokit.models.tiny` on first use (it imports torch and
transformers), so ``grpokit.models.shapes`` can be imported without them.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "LIKES",
    "SHAPES",
    "ModelShape",
    "build_model",
    "build_tokenizer",
    "count_parameters",
    "model_config",
    "resolve_shape",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("grpokit.models.tiny"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

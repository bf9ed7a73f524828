"""Models the kit builds itself: random-weight smoke models (`grpokit.models.tiny`)."""

from grpokit.models.tiny import (
    LIKES,
    SHAPES,
    ModelShape,
    build_model,
    build_tokenizer,
    count_parameters,
    model_config,
    resolve_shape,
)

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

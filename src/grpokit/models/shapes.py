"""The shapes the smoke-model builder (:mod:`grpokit.models.tiny`) can build, and Qwen's special tokens.

Plain data, no torch or transformers: ``grpokit make-tiny-model --help`` lists ``LIKES`` without
loading them. :mod:`grpokit.models.tiny` describes each shape and builds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Qwen's special tokens in id order from <|endoftext|>, with the "special" flag of Qwen3's
# tokenizer_config.json (non-special ones survive skip_special_tokens=True decoding, so tool
# calls and think blocks reach the parsers). Qwen3.5 keeps this order: Qwen3_5Config's
# vision_start/image/video token ids 248053/248056/248057 are 248044 (<|endoftext|>) + 9/12/13.
QWEN_SPECIAL_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

_TINY = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2}
_TINY_ATTENTION = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64}


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """One buildable model: its transformers config and its tokenizer layout."""

    like: str
    model_type: str  # transformers config model_type; its class comes from AutoConfig
    architecture: str  # the class written to config.json (the wrapper's for a multimodal shape)
    vocab_size: int  # embedding rows == len(tokenizer)
    first_special_id: int  # id of <|endoftext|>; Qwen's special tokens follow it
    bpe_vocab_size: int  # BPE tokens learnt from the text at most (ids below first_special_id)
    config: dict[str, Any] = field(default_factory=dict)  # the config class's other fields
    # Multimodal wrapper (None: a text-only causal LM). When set, `model_type`/`config` describe the
    # text model, written under the wrapper's ``text_config``, and `architecture` is the wrapper's.
    wrapper_model_type: str | None = None
    vision_config: dict[str, Any] | None = None


SHAPES: dict[str, ModelShape] = {
    # gpu-stack.md: hidden 256, intermediate 512, 2 layers, 4 heads, 2 KV heads, head dim 64,
    # tied embeddings, vocab 4096. rope_theta 1e6 and 32k positions as Qwen3's small models.
    "tiny-qwen3": ModelShape(
        like="tiny-qwen3",
        model_type="qwen3",
        architecture="Qwen3ForCausalLM",
        vocab_size=4096,
        first_special_id=4096 - len(QWEN_SPECIAL_TOKENS),
        bpe_vocab_size=4096 - len(QWEN_SPECIAL_TOKENS),
        config={
            **_TINY,
            **_TINY_ATTENTION,
            "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "tie_word_embeddings": True,
        },
    ),
    # The tiny size in the Qwen3.5 text architecture: one linear-attention then one
    # full-attention layer (Qwen3.5 repeats 3 linear + 1 full), linear-attention heads sized
    # like the attention heads; rope as Qwen3.5 with the mrope sections scaled to the 8
    # frequency pairs of a 64 * 0.25 = 16-dim rotary part (vLLM requires they sum to 8).
    "tiny-qwen3.5": ModelShape(
        like="tiny-qwen3.5",
        model_type="qwen3_5_text",
        architecture="Qwen3_5ForCausalLM",
        vocab_size=4096,
        first_special_id=4096 - len(QWEN_SPECIAL_TOKENS),
        bpe_vocab_size=4096 - len(QWEN_SPECIAL_TOKENS),
        config={
            **_TINY,
            **_TINY_ATTENTION,
            "layer_types": ["linear_attention", "full_attention"],
            "linear_num_key_heads": 4,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 64,
            "linear_value_head_dim": 64,
            "linear_conv_kernel_dim": 4,
            "max_position_embeddings": 32768,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10_000_000.0,
                "partial_rotary_factor": 0.25,
                "mrope_section": [3, 3, 2],
                "mrope_interleaved": True,
            },
            "tie_word_embeddings": True,
        },
    ),
    # Qwen3.5-0.8B text model. Sources: [P] the public figures of Qwen/Qwen3.5-0.8B (24 layers,
    # hidden 1024, FFN 3584, 8 heads, 2 KV heads, head dim 256, output-gated attention, partial
    # rotary 0.25, rope theta 1e7, vocab 248,320, hybrid layers); [C] its config.json
    # (text_config); [T] defaults of transformers 5.10's Qwen3_5TextConfig. [C] figures were
    # checked by count: with its vision config (depth 12, hidden 768, FFN 3072, 12 heads, out
    # 1024), Qwen3_5ForConditionalGeneration has 852,985,920 parameters, the reference run's
    # 852.99 M; 32 linear value heads or untied embeddings would give 966.97 M / 1107.27 M.
    "qwen3.5-0.8b": ModelShape(
        like="qwen3.5-0.8b",
        model_type="qwen3_5_text",
        architecture="Qwen3_5ForConditionalGeneration",  # [C]; vLLM 0.24 loads only this form
        wrapper_model_type="qwen3_5",  # [C]
        vision_config={  # [C]
            "depth": 12,
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_heads": 12,
            "out_hidden_size": 1024,
            "hidden_act": "gelu_pytorch_tanh",
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [],
        },
        vocab_size=248_320,  # [P]
        first_special_id=248_044,  # [C] <|endoftext|>; cf. Qwen3_5Config.image_token_id 248056
        bpe_vocab_size=8192,  # ours: the rest of the ids below 248044 are fillers
        config={
            "hidden_size": 1024,  # [P]
            "intermediate_size": 3584,  # [P]
            "num_hidden_layers": 24,  # [P]
            "num_attention_heads": 8,  # [P]; q_proj is 2x wide: the output gate (always on in [T])
            "num_key_value_heads": 2,  # [P]
            "head_dim": 256,  # [P], also [T]
            # [C] full_attention_interval 4: layers 4, 8, ..., 24 are full attention ([T]'s rule)
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 6,
            "linear_num_key_heads": 16,  # [C], also [T]
            "linear_num_value_heads": 16,  # [C]; [T] has 32 (the larger models)
            "linear_key_head_dim": 128,  # [C], also [T]
            "linear_value_head_dim": 128,  # [C], also [T]
            "linear_conv_kernel_dim": 4,  # [C], also [T]
            "max_position_embeddings": 262_144,  # [C]
            "rms_norm_eps": 1e-6,  # [C], also [T]
            "hidden_act": "silu",  # [T]
            "attention_bias": False,  # [T]
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10_000_000.0,  # [P]
                "partial_rotary_factor": 0.25,  # [P]
                "mrope_section": [11, 11, 10],  # [C], also [T]'s fallback
                "mrope_interleaved": True,  # [C]
            },
            "tie_word_embeddings": True,  # [C]
        },
    ),
}
# `tiny` is the rollout-safe default (grpokit.models.tiny says why).
ALIASES: dict[str, str] = {"tiny": "tiny-qwen3"}
LIKES: tuple[str, ...] = (*ALIASES, *SHAPES)


def resolve_shape(like: str) -> ModelShape:
    """The shape named `like` (an alias or a key of `SHAPES`); ValueError lists valid names."""
    shape = SHAPES.get(ALIASES.get(like, like))
    if shape is None:
        raise ValueError(f"unknown model shape like={like!r}; choose one of {', '.join(LIKES)}")
    return shape

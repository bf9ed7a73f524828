"""Random-weight smoke models of the Qwen3 / Qwen3.5 family, with a small BPE tokenizer.

A smoke model proves the plumbing of a cluster and a config (rollout, weight sync, checkpoints,
merge, serving) in minutes; it learns nothing (random weights score 0). Shapes (`SHAPES`):

- ``tiny`` / ``tiny-qwen3``: ``Qwen3ForCausalLM``, hidden 256, 2 layers, vocab 4096, ~2.2 M
  parameters: the model that trained, resumed, merged and served on the GPU host
  (docs/gpu-stack.md, "A model to train"). It is the default because vLLM 0.24.0, the
  rollout engine there, cannot load a text-only ``Qwen3_5ForCausalLM`` checkpoint: its registry
  lists Qwen3.5 only as ``Qwen3_5ForConditionalGeneration``, to which it maps the text-only
  name, and that class reads ``config.vision_config``.
- ``tiny-qwen3.5``: the same size in the Qwen3.5 text architecture (``Qwen3_5ForCausalLM``:
  gated attention, Gated DeltaNet linear-attention layers, partial rotary); needs transformers
  with ``transformers.models.qwen3_5``.
- ``qwen3.5-0.8b``: the architecture of the published Qwen/Qwen3.5-0.8B checkpoint: the
  multimodal ``Qwen3_5ForConditionalGeneration`` (config ``model_type`` ``qwen3_5``, the text
  model under ``text_config``, a 12-layer vision tower under ``vision_config``), 852,985,920
  parameters of which 752,393,024 are the language model (embeddings tied); vocab 248,320.
  Written with the processor files of the published checkpoint (``preprocessor_config.json``,
  ``video_preprocessor_config.json``: ``Qwen3VLProcessor``). On the GPU host (2026-12-01) verl's
  FSDP actor and ref loaded it (852.99 M parameters) and vLLM 0.24.0 accepted its config; the
  engine building the model was not reached in the time available (docs/performance.md).

The tokenizer has exactly ``vocab_size`` tokens: byte-level BPE trained on the given text, then
``<|reserved_N|>`` filler tokens (N = the id; never produced by encoding), then Qwen's special
tokens at the ids Qwen gives them relative to ``<|endoftext|>``, then fillers up to the end.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GenerationConfig,
    PreTrainedConfig,
    PreTrainedTokenizerFast,
)

from grpokit.models.texts import (  # noqa: F401  (re-exported: the builder's text sources)
    TOOL_MEMORY_CONVERSATION,
    TOOL_MEMORY_TOOLS,
    default_tokenizer_data,
    iter_texts,
    scaffolding_texts,
)

log = logging.getLogger(__name__)

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
PAD_TOKEN = BOS_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"

# Pre-tokenizer split of Qwen3.5's tokenizer (transformers/models/qwen3_5/tokenization_qwen3_5.py);
# digits split one by one, which suits GSM8K arithmetic.
_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
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
# `tiny` is the rollout-safe default (see the module docstring).
ALIASES: dict[str, str] = {"tiny": "tiny-qwen3"}
LIKES: tuple[str, ...] = (*ALIASES, *SHAPES)


def resolve_shape(like: str) -> ModelShape:
    """The shape named `like` (an alias or a key of `SHAPES`); ValueError lists valid names."""
    shape = SHAPES.get(ALIASES.get(like, like))
    if shape is None:
        raise ValueError(f"unknown model shape like={like!r}; choose one of {', '.join(LIKES)}")
    return shape


def build_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    *,
    first_special_id: int | None = None,
    bpe_vocab_size: int | None = None,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer of exactly `vocab_size` tokens with Qwen's specials.

    Layout (ids): [0, n) BPE tokens learnt from `texts`, n <= min(`bpe_vocab_size`,
    `first_special_id`) (fewer when the text has fewer merges); [n, first_special_id) fillers
    ``<|reserved_ID|>``; then `QWEN_SPECIAL_TOKENS`; then fillers up to `vocab_size`.
    `first_special_id` defaults to the end of the vocab. Normalizer and pre-tokenizer are those
    of Qwen3.5's tokenizer. eos is ``<|im_end|>``, pad and bos ``<|endoftext|>`` (bos is never
    added by encoding, as in Qwen). The chat template is `chat_template.jinja`.

    Raises ValueError when the specials do not fit below `vocab_size`.
    """
    n_special = len(QWEN_SPECIAL_TOKENS)
    first_special_id = vocab_size - n_special if first_special_id is None else first_special_id
    if first_special_id < 256 or first_special_id + n_special > vocab_size:
        raise ValueError(
            f"first_special_id={first_special_id} must leave 256 byte tokens below it and "
            f"{n_special} special tokens below vocab_size={vocab_size}"
        )
    bpe_limit = min(bpe_vocab_size or first_special_id, first_special_id)

    trained = Tokenizer(BPE())
    _set_qwen_pipeline(trained)
    trainer = BpeTrainer(
        vocab_size=bpe_limit, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    trained.train_from_iterator(texts, trainer)
    model_state = json.loads(trained.to_str())["model"]
    vocab: dict[str, int] = dict(model_state["vocab"])
    merges = [tuple(pair) for pair in model_state["merges"]]
    n_bpe = len(vocab)

    specials = {content: first_special_id + i for i, (content, _) in enumerate(QWEN_SPECIAL_TOKENS)}
    for token_id in range(n_bpe, vocab_size):
        if token_id < first_special_id or token_id >= first_special_id + n_special:
            vocab[f"<|reserved_{token_id}|>"] = token_id
    vocab.update(specials)  # in the model vocab too, so added tokens keep these exact ids

    tokenizer = Tokenizer(BPE(vocab=vocab, merges=merges))
    _set_qwen_pipeline(tokenizer)
    tokenizer.add_tokens(
        [AddedToken(content, special=special, normalized=False) for content, special in QWEN_SPECIAL_TOKENS]
    )
    log.info(
        "tokenizer: %d BPE tokens learnt, %d fillers, specials at %d..%d, %d in all",
        n_bpe,
        vocab_size - n_bpe - n_special,
        first_special_id,
        first_special_id + n_special - 1,
        tokenizer.get_vocab_size(),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        additional_special_tokens=[content for content, special in QWEN_SPECIAL_TOKENS if special],
        chat_template=chat_template(),
        model_max_length=131_072,
        clean_up_tokenization_spaces=False,
    )


def chat_template() -> str:
    """The Jinja chat template shipped with the package (`chat_template.jinja`)."""
    return resources.files("grpokit.models").joinpath("chat_template.jinja").read_text(encoding="utf-8")


def model_config(shape: ModelShape, tokenizer: PreTrainedTokenizerFast) -> PreTrainedConfig:
    """The transformers config of `shape`, with token ids and vocab size from `tokenizer`.

    For a multimodal shape (``shape.wrapper_model_type``) this is the wrapper's config: the text
    config under ``text_config``, ``shape.vision_config`` under ``vision_config``, the vision
    token ids from `tokenizer`.

    Raises ValueError when `tokenizer` has not exactly ``shape.vocab_size`` tokens, and
    RuntimeError when the installed transformers lacks ``shape.model_type``.
    """
    if len(tokenizer) != shape.vocab_size:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens; like={shape.like} needs {shape.vocab_size}")
    try:
        config = AutoConfig.for_model(
            shape.model_type,
            **shape.config,
            vocab_size=shape.vocab_size,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    except ValueError as error:
        import transformers

        raise RuntimeError(
            f"transformers {transformers.__version__} has no model_type {shape.model_type!r} needed by "
            f"like={shape.like}; install a transformers that has it or pick like=tiny-qwen3"
        ) from error
    config.dtype = torch.bfloat16
    if shape.wrapper_model_type is not None:
        config.architectures = None  # the text config inside the wrapper names no class
        ids = tokenizer.convert_tokens_to_ids
        config = AutoConfig.for_model(
            shape.wrapper_model_type,
            text_config=config.to_dict(),
            vision_config=dict(shape.vision_config or {}),
            image_token_id=ids("<|image_pad|>"),
            video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"),
            vision_end_token_id=ids("<|vision_end|>"),
            tie_word_embeddings=shape.config.get("tie_word_embeddings", False),
        )
        config.dtype = torch.bfloat16
    config.architectures = [shape.architecture]
    return config


def _model_class(config: PreTrainedConfig) -> Any:
    """The transformers class named by ``config.architectures[0]``."""
    import transformers

    return getattr(transformers, config.architectures[0])


def count_parameters(config: PreTrainedConfig) -> int:
    """Parameters of the model `config` builds (its ``architectures[0]`` class, or the causal LM
    of a text config), counted on the meta device (no memory). Tied weights count once.
    """
    with torch.device("meta"):
        if config.architectures:
            model = _model_class(config)._from_config(config)
        else:
            model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def build_model(
    out_dir: str | Path,
    like: str = "tiny",
    tokenizer_data: Iterable[str | Path] | None = None,
    seed: int = 0,
) -> Path:
    """Build a random-weight model directory that `from_pretrained` loads; returns its path.

    Writes config.json (architectures, dtype/torch_dtype bfloat16, token ids of the
    tokenizer), generation_config.json, model.safetensors (bf16, initialised with
    `torch.manual_seed(seed)`), tokenizer.json + tokenizer_config.json (chat template inside);
    for a multimodal shape also the processor files (`PROCESSOR_FILES`).
    `tokenizer_data`: text files or folders (see `iter_texts`); None uses
    `default_tokenizer_data()`. Prompt scaffolding (tool-memory prompts, the chat template's
    tool-call format) is always added. Time: seconds for tiny; about a minute and 1.5 GB for
    qwen3.5-0.8b on 2 CPU cores.

    Raises ValueError for an unknown `like`, FileNotFoundError for a missing data file.
    """
    shape = resolve_shape(like)
    out = Path(out_dir)
    texts: Iterator[str] = iter_texts(tokenizer_data)
    tokenizer = build_tokenizer(
        _chain(texts, scaffolding_texts(chat_template())),
        shape.vocab_size,
        first_special_id=shape.first_special_id,
        bpe_vocab_size=shape.bpe_vocab_size,
    )
    config = model_config(shape, tokenizer)

    torch.manual_seed(seed)
    model = _model_class(config)._from_config(config, dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        # Qwen lists both: a chat turn ends with <|im_end|>, raw text with <|endoftext|>.
        eos_token_id=[tokenizer.eos_token_id, tokenizer.pad_token_id],
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(out)
    _patch_json(out / "config.json", torch_dtype="bfloat16")
    if shape.wrapper_model_type is not None:
        _write_processor_files(out, config)
    _patch_json(out / "tokenizer_config.json", tokenizer_class="PreTrainedTokenizerFast")
    log.info("built %s (%s, %.2f M parameters, seed %d) in %s", like, shape.architecture, n_params / 1e6, seed, out)
    return out


# The processor files of the published Qwen3.5 checkpoints (Qwen3-VL's processor): vLLM builds
# the multimodal processor from them at engine start, verl's `hf_processor` loads them. Written
# as JSON: building the processor objects needs torchvision, which the kit does not require.
_MEDIA = {"temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
PROCESSOR_FILES: dict[str, dict[str, Any]] = {
    "preprocessor_config.json": {
        **_MEDIA,
        "size": {"longest_edge": 16_777_216, "shortest_edge": 65_536},
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "processor_class": "Qwen3VLProcessor",
    },
    "video_preprocessor_config.json": {
        **_MEDIA,
        "size": {"longest_edge": 25_165_824, "shortest_edge": 4096},
        "fps": 2,
        "min_frames": 4,
        "max_frames": 768,
        "do_sample_frames": True,
        "video_processor_type": "Qwen3VLVideoProcessor",
        "processor_class": "Qwen3VLProcessor",
    },
}


def _write_processor_files(out: Path, config: PreTrainedConfig) -> None:
    patch = config.vision_config.patch_size
    for name, values in PROCESSOR_FILES.items():
        data = {**values, "patch_size": patch}
        (out / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _set_qwen_pipeline(tokenizer: Tokenizer) -> None:
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()


def _chain(*iterables: Iterable[str]) -> Iterator[str]:
    for iterable in iterables:
        yield from iterable


def _patch_json(path: Path, **values: Any) -> None:
    # config.json: transformers 5 writes "dtype", transformers 4 reads "torch_dtype": write both.
    # tokenizer_config.json: transformers 5 writes its class name "TokenizersBackend", unknown to
    # transformers 4; "PreTrainedTokenizerFast" names the same class in both.
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(values)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")

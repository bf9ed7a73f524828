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

from grpokit.models.shapes import (  # noqa: F401  (re-exported: the shapes this module builds)
    ALIASES,
    LIKES,
    QWEN_SPECIAL_TOKENS,
    SHAPES,
    ModelShape,
    resolve_shape,
)
from grpokit.models.texts import (  # noqa: F401  (re-exported: the builder's text sources)
    TOOL_MEMORY_CONVERSATION,
    TOOL_MEMORY_TOOLS,
    default_tokenizer_data,
    iter_texts,
    scaffolding_texts,
)

log = logging.getLogger(__name__)

PAD_TOKEN = BOS_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"

# Pre-tokenizer split of Qwen3.5's tokenizer (transformers/models/qwen3_5/tokenization_qwen3_5.py);
# digits split one by one, which suits GSM8K arithmetic.
_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


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

"""The actor's forward + backward on one micro batch of the reference config, lever by lever.

    python bench/bench_actor.py MODEL_DIR [--seqs 8 --seq-len 1536] [--variants fla+fused,...]

What it isolates: the part of a GRPO step that dominated the first H200 measurement
(update_actor ~27.5 s of ~51 s, docs/performance.md), for one micro batch of the h200 profile's
token cap (8 sequences of 512 + 1024 tokens = 12,288 tokens, padded layout as with
``use_remove_padding=false``). The model is the full-shape folder, in bf16 on one GPU, with verl's
own Qwen3.5 patch (``verl.models.transformers.monkey_patch.apply_monkey_patch``); no FSDP, no
optimizer, so the memory figures are the activations' and logits' share plus ~3.4 GB of bf16
weights and gradients, not a whole actor's.

Variants (comma separated, each ``+``-joined): ``fla`` or ``torch`` (Gated-DeltaNet chunk kernel:
flash-linear-attention's Triton kernel or transformers' plain-PyTorch one), ``fused`` or ``logits``
(verl's Triton linear-cross-entropy from hidden states, or the [tokens, vocab] logits and a
log-softmax), ``ckpt`` (gradient checkpointing). Per variant: one warm-up pass (Triton compiles),
then ``--reps`` timed passes; prints one line each: variant, s/pass, peak allocated GiB.
"""

from __future__ import annotations

import argparse
import time

import torch


def _set_gdn_kernel(model, kernel: str) -> None:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    chunk = m.torch_chunk_gated_delta_rule
    if kernel == "fla":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as chunk
    for module in model.modules():
        if hasattr(module, "chunk_gated_delta_rule"):
            module.chunk_gated_delta_rule = chunk


def _log_probs(model, ids, mask, fused: bool) -> torch.Tensor:
    from verl.models.transformers import qwen3_5
    from verl.utils.torch_functional import logprobs_from_logits

    if fused:
        out = qwen3_5.forward_with_triton_backend(
            model, input_ids=ids, attention_mask=mask, temperature=1.0, use_cache=False
        )
        return out.log_probs
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    return logprobs_from_logits(logits[:, :-1], ids[:, 1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", help="the full-shape model folder (make_tiny_model.py --like qwen3.5-0.8b)")
    parser.add_argument("--seqs", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=1536)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--variants", default="fla+fused,fla+logits,torch+fused,fla+fused+ckpt")
    args = parser.parse_args()

    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
    from verl.models.transformers.monkey_patch import apply_monkey_patch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    # the full shape is the multimodal wrapper; the CPU test's tiny-qwen3.5 is text-only
    text_only = AutoConfig.from_pretrained(args.model).model_type.endswith("_text")
    auto = AutoModelForCausalLM if text_only else AutoModelForImageTextToText
    model = auto.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.to(device).train()
    model.config.use_cache = False
    apply_monkey_patch(model, use_remove_padding=False)
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (args.seqs, args.seq_len), device=device)
    mask = torch.ones_like(ids)
    print(f"model {sum(p.numel() for p in model.parameters()):,} parameters, batch {tuple(ids.shape)}", flush=True)
    for variant in args.variants.split(","):
        parts = set(variant.split("+"))
        times = []
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            _set_gdn_kernel(model, "fla" if "fla" in parts else "torch")
            if "ckpt" in parts:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_disable()
            for rep in range(args.reps + 1):
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                logp = _log_probs(model, ids, mask, fused="fused" in parts)
                (-logp.float().mean()).backward()
                if device == "cuda":
                    torch.cuda.synchronize()
                if rep:
                    times.append(time.perf_counter() - t0)
                else:
                    warm = time.perf_counter() - t0
                model.zero_grad(set_to_none=True)
                del logp
        except Exception as exc:  # a variant that fails (kernel missing, OOM) is reported, the rest run
            print(f"{variant}: FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
            model.zero_grad(set_to_none=True)
            continue
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
        print(
            f"{variant}: {sum(times) / len(times):.3f} s/pass (warm-up {warm:.1f} s), peak allocated {peak:.1f} GiB",
            flush=True,
        )


if __name__ == "__main__":
    main()

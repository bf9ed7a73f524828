"""Memory and time model of the ``h200`` profile's token caps (issue 26), from measured figures only.

    python bench/token_caps.py [--budget-gb 80] [--gpu-total-mib 143771]

Prints, per candidate cap (a multiple of prompt + response = 1,536 tokens), the micro batches of the
reference step, the predicted peak GPU memory of all processes and the predicted time of the pass;
then the caps the profile sets (``src/grpokit/configs/hardware/h200.yaml``) and the predicted step.

What is measured (one H200; ``MEASURED``; docs/performance.md has the sources):
- one micro batch of the full-shape actor alone on the GPU (no FSDP, no optimizer; plain-PyTorch
  Gated-DeltaNet, full logits): forward + backward 23.5 GiB at 3,072 tokens and 88.3 GiB at 12,288,
  about 1.3 s per pass at both (the time per token falls 3.7x); forward only 0.28 s at 3,072 tokens,
  0.82 s and 25.8 GiB at 49,152;
- the whole reference step of the committed profile (cap 3,072 for all three passes, commit
  c9bf84e, steps 2-3): update 64.8 / 61.8 s, old log-prob 18.5 / 16.2 s, ref 17.6 / 18.9 s,
  generation 6.3 / 6.2 s; 64 sequences, 70,968 tokens (prompt mean 85, max 139; every response
  1,024); the actor's peak 31.7 GiB allocated / 34.3 GiB reserved; all processes' GPU memory
  (``nvidia-smi``, 2-s samples) 37,761 MiB during the update, 21,201 MiB during the log-prob passes,
  55,243 MiB during generation.

- the whole reference step of the h200 profile (update cap 6,144, log-prob caps 18,432; kit 0ff6d18,
  2026-12-05, steps 2-3): update 38.7 / 39.5 s, old log-prob 8.3 / 7.7 s, ref 7.4 / 7.8 s, generation
  8.3 / 8.3 s; the actor's peak 70.2 GiB allocated / 81.9 GiB reserved; all processes 85,665 MiB at
  most during the update.

What is derived (``predict_*``), each step named in the docstrings: the update's memory on the line
through the two measured whole steps; the log-prob passes' memory per padded token (the
micro-benchmark's slope) on top of a constant calibrated from the first whole step (parameters,
gradients, AdamW states, the ref model, the sleeping vLLM engine, CUDA contexts, all together),
and the time per micro batch (the micro-benchmark's pass) plus verl's own per-token cost calibrated
from the first whole step (it predicted the second step's update within 1 s). Only the two calibration
caps are measured; every other row printed here is a prediction.

How verl applies a cap (verl 0.9.1, read in its source): with ``use_dynamic_bsz`` (actor) and
``log_prob_use_dynamic_bsz`` (rollout, ref) true, ``verl.utils.seqlen_balancing.rearrange_micro_batches``
splits the batch into the fewest micro batches whose summed *unpadded* lengths stay within the cap
(Karmarkar-Karp balanced) and refuses a cap below the longest sequence; with padding kept
(``use_remove_padding=false``) each micro batch is padded to its longest sequence, so the memory
follows ``sequences x longest``, which :func:`micro_batches` returns as ``padded``. The keys:
``actor.ppo_max_token_len_per_gpu`` (update), ``rollout.log_prob_max_token_len_per_gpu`` (the actor's
old log-prob pass), ``ref.log_prob_max_token_len_per_gpu`` (the ref pass;
``verl.workers.engine_workers``).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

GIB = 2**30
PARAMS = 852_985_920  # Qwen3.5-0.8B, vision tower included (src/grpokit/models/tiny.py)
VOCAB = 248_320

MEASURED = {
    # micro-benchmark (bench/bench_actor.py, actor_caps.py of the c9bf84e measurement): tokens -> value
    "fb_peak_gib": {3072: 23.5, 12288: 88.3},
    "fb_s": {3072: 1.30, 12288: 1.30 * 4 / 3.7},  # "about 1.3 s"; the time per token falls 3.7x
    "fwd_s": {3072: 0.28, 49152: 0.82},
    "fwd_peak_gib": {49152: 25.8},
    # the whole step at cap 3,072 (commit c9bf84e, steps 2 and 3)
    "step_cap": 3072,
    "step_seqs": 64,
    "step_tokens": 70_968,
    "step_longest": 139 + 1024,
    "update_s": (64.8, 61.8),
    "log_prob_s": (18.5, 16.2, 17.6, 18.9),  # old log-prob and ref, both steps
    "gen_s": (6.3, 6.2),
    "rest_s": 0.5,  # update_weights 0.3-0.4 + adv 0.1
    "actor_alloc_gib": 31.7,
    "actor_reserved_gib": 34.3,
    "all_update_mib": 37_761,
    "all_log_prob_mib": 21_201,
    "all_gen_mib": 55_243,
    "gpu_total_mib": 143_771,
    "rollout_share": 0.3,
    "floor_s": 1.04,
    # the whole reference step at the update cap 6,144 (log-prob caps 18,432; kit 0ff6d18, 2026-12-05,
    # steps 2 and 3; docs/measurements/h200-caps-0ff6d18): all processes' peak during the update
    # (nvidia-smi, 2-s samples), the parts' seconds
    "step2_cap": 6144,
    "step2_all_update_mib": 85_665,
    "step2_update_s": (38.7, 39.5),
    "step2_log_prob_s": (8.3, 7.7, 7.4, 7.8),
    "step2_gen_s": (8.3, 8.3),
    "step2_actor_alloc_gib": 70.2,
    "step2_actor_reserved_gib": 81.9,
}


def _line(points: dict[int, float], x: float) -> float:
    (x0, y0), (x1, y1) = sorted(points.items())
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class Split:
    """Micro batches of one pass: ``count`` micro batches of at most ``seqs`` sequences; ``padded``:
    tokens of the largest one after padding to its longest sequence."""

    count: int
    seqs: int
    padded: int


def micro_batches(cap: int, seqs: int, mean_len: float, longest: int) -> Split:
    """verl's split of ``seqs`` sequences of about ``mean_len`` unpadded tokens (the longest
    ``longest``) under a token cap, for sequences of near-equal length (the reference step: every
    response 1,024 tokens). Raises ValueError when the cap is below the longest sequence (verl
    refuses it: ``max_token_len must be greater than the sequence length``)."""
    if cap < longest:
        raise ValueError(f"token cap {cap} is below the longest sequence ({longest} tokens): verl refuses it")
    per = max(1, int(cap // mean_len))
    return Split(count=math.ceil(seqs / per), seqs=per, padded=per * longest)


# --- memory ---------------------------------------------------------------------------------
FB_GIB_PER_TOKEN = (MEASURED["fb_peak_gib"][12288] - MEASURED["fb_peak_gib"][3072]) / (12288 - 3072)
"""Activations of forward + backward per padded token (the micro-benchmark's slope, 7.0 GiB per 1k)."""
WEIGHTS_GIB = PARAMS * 2 / GIB
FWD_GIB_PER_TOKEN_BENCH = (MEASURED["fwd_peak_gib"][49152] - WEIGHTS_GIB) / 49152
"""Forward only, per token, as the micro-benchmark measured it (0.50 GiB per 1k: logits and log-probs)."""
FWD_GIB_PER_TOKEN = FWD_GIB_PER_TOKEN_BENCH + 3 * VOCAB * 2 / GIB
"""Forward only in verl, an upper bound: verl's pass also keeps a copy of the logits, their softmax
for the entropy and one product of both, each ``VOCAB`` bf16 values per token (1.42 GiB per 1k more;
read in verl's ``transformer_impl``, not measured)."""
RESERVED_PER_ALLOCATED = MEASURED["actor_reserved_gib"] / MEASURED["actor_alloc_gib"]
"""The caching allocator's reserve over the peak allocation, in the measured step (1.08)."""
_CAL = micro_batches(
    MEASURED["step_cap"], MEASURED["step_seqs"], MEASURED["step_tokens"] / 64, MEASURED["step_longest"]
)
LOG_PROB_BASE_GIB = MEASURED["all_log_prob_mib"] / 1024 - RESERVED_PER_ALLOCATED * FWD_GIB_PER_TOKEN_BENCH * _CAL.padded
"""All processes during the log-prob passes without the micro batch (19.5 GiB; the micro-benchmark's
slope taken out, so the constant is the larger of the two readings)."""


_CAL2 = micro_batches(
    MEASURED["step2_cap"], MEASURED["step_seqs"], MEASURED["step_tokens"] / 64, MEASURED["step_longest"]
)
UPDATE_GIB_PER_TOKEN = (
    (MEASURED["step2_all_update_mib"] - MEASURED["all_update_mib"]) / 1024 / (_CAL2.padded - _CAL.padded)
)
"""All processes' peak during the update per padded token of the largest micro batch, from the two
measured whole steps (caps 3,072 and 6,144: 13.4 GiB per 1k). The micro-benchmark's slope times the
allocator's reserve (7.6 GiB per 1k) underestimated it: the step at 6,144 peaked at 83.7 GiB where
that slope predicted 63.4 (verl's loss keeps vocabulary-sized tensors per token besides the model's
activations, and the reserve grew to 1.17x)."""


def predict_update_gib(padded: int) -> float:
    """Peak GPU memory of all processes (GiB) during the update with ``padded`` tokens per micro batch:
    the line through the two measured whole steps (interpolated between 2,326 and 5,815 padded tokens,
    extrapolated outside)."""
    return MEASURED["all_update_mib"] / 1024 + UPDATE_GIB_PER_TOKEN * (padded - _CAL.padded)


def predict_log_prob_gib(padded: int) -> float:
    """Peak GPU memory of all processes (GiB) during a forward-only log-prob pass (upper bound)."""
    return LOG_PROB_BASE_GIB + RESERVED_PER_ALLOCATED * FWD_GIB_PER_TOKEN * padded


def predict_generation_gib(gpu_total_mib: float, share: float = MEASURED["rollout_share"]) -> float:
    """All processes during generation: vLLM's share of the GPU's total plus what the actor keeps
    (the measured step minus vLLM's 0.3 share of the H200)."""
    actor_kept = MEASURED["all_gen_mib"] - MEASURED["rollout_share"] * MEASURED["gpu_total_mib"]
    return (share * gpu_total_mib + actor_kept) / 1024


# --- time ----------------------------------------------------------------------------------
_UPDATE_S = sum(MEASURED["update_s"]) / len(MEASURED["update_s"])
_LOG_PROB_S = sum(MEASURED["log_prob_s"]) / len(MEASURED["log_prob_s"])
UPDATE_S_PER_TOKEN = (_UPDATE_S - _CAL.count * _line(MEASURED["fb_s"], _CAL.padded)) / MEASURED["step_tokens"]
"""verl's update work beyond the model's forward + backward, per token (0.31 ms): loss, KL,
optimizer, FSDP; calibrated so the model reproduces the measured update."""
LOG_PROB_S_PER_TOKEN = (_LOG_PROB_S - _CAL.count * _line(MEASURED["fwd_s"], _CAL.padded)) / MEASURED["step_tokens"]
"""verl's log-prob pass beyond the model's forward, per token (0.13 ms), calibrated the same way."""


def predict_update_s(split: Split, tokens: int) -> float:
    """Seconds of the update: each micro batch's forward + backward (the micro-benchmark: nearly
    constant, the plain-PyTorch GDN walks the sequence in chunks) plus verl's per-token work."""
    return split.count * _line(MEASURED["fb_s"], split.padded) + UPDATE_S_PER_TOKEN * tokens


def predict_log_prob_s(split: Split, tokens: int) -> float:
    """Seconds of one forward-only log-prob pass (old log-prob or ref)."""
    return split.count * _line(MEASURED["fwd_s"], split.padded) + LOG_PROB_S_PER_TOKEN * tokens


# --- the choice ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """The largest cap, as a multiple of prompt + response, whose predicted peak fits the budget in
    the reference step and when every sequence is full length (prompt + response)."""

    multiple: int
    cap: int
    split: Split
    peak_gib: float
    worst_gib: float


def largest_cap(kind: str, budget_gib: float, seq_len: int = 1536, most: int = 48) -> Choice:
    """kind: "update" or "log_prob". Raises ValueError when not even one sequence fits."""
    peak = {"update": predict_update_gib, "log_prob": predict_log_prob_gib}[kind]
    best = None
    for m in range(1, most + 1):
        cap = m * seq_len
        ref = micro_batches(cap, MEASURED["step_seqs"], MEASURED["step_tokens"] / 64, MEASURED["step_longest"])
        worst = micro_batches(cap, MEASURED["step_seqs"], seq_len, seq_len)
        if max(peak(ref.padded), peak(worst.padded)) > budget_gib:
            break
        best = Choice(m, cap, ref, peak(ref.padded), peak(worst.padded))
    if best is None:
        raise ValueError(f"{kind}: not even one sequence of {seq_len} tokens fits {budget_gib:.1f} GiB")
    return best


PROFILE_UPDATE_MULTIPLE = 4
"""``actor.ppo_max_token_len_per_gpu`` = 4 x (prompt + response) in the h200 profile, sized for the
profile's ``gpu_memory_gb`` (96): measured 83.7 GiB of all processes in the update (2026-12-05). On an
80 GB card the largest that fits is 3 x (predicted 68.1 GiB, interpolated, not measured)."""
PROFILE_BUDGET_GB = 96
"""``hardware.gpu_memory_gb`` of the h200 profile: the GPU memory its caps were sized for (1e9 bytes)."""
PROFILE_LOG_PROB_MULTIPLE = 12
"""``rollout.``/``ref.log_prob_max_token_len_per_gpu`` = 12 x (prompt + response) in the h200 profile:
below the largest that fits (see :func:`main`), because the time saved past it is under 1 s a pass."""


def predict_step(update_cap: int, log_prob_cap: int) -> dict[str, float]:
    """Predicted parts of the reference step (s): measured generation and the rest, predicted passes."""
    mean = MEASURED["step_tokens"] / MEASURED["step_seqs"]
    tokens, seqs, longest = MEASURED["step_tokens"], MEASURED["step_seqs"], MEASURED["step_longest"]
    upd = predict_update_s(micro_batches(update_cap, seqs, mean, longest), tokens)
    lp = predict_log_prob_s(micro_batches(log_prob_cap, seqs, mean, longest), tokens)
    gen = sum(MEASURED["gen_s"]) / len(MEASURED["gen_s"])
    step = gen + 2 * lp + upd + MEASURED["rest_s"]
    return {
        "gen": gen,
        "old_log_prob": lp,
        "ref": lp,
        "update_actor": upd,
        "step": step,
        "floor_multiple": step / MEASURED["floor_s"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget-gb", type=float, default=80.0, help="all processes' peak, in 1e9 bytes (80: an H100)")
    p.add_argument("--gpu-total-mib", type=float, default=81_559, help="the smallest GPU to fit (H100 80GB)")
    args = p.parse_args(argv)
    budget = args.budget_gb * 1e9 / GIB
    mean = MEASURED["step_tokens"] / MEASURED["step_seqs"]
    seqs, tokens, longest = MEASURED["step_seqs"], MEASURED["step_tokens"], MEASURED["step_longest"]
    print(f"budget: {args.budget_gb:g} GB = {budget:.1f} GiB, all processes (predicted, not measured)")
    print("| cap | micro batches | padded tokens | update GiB | update s | log-prob GiB (upper) | log-prob s |")
    print("|---|---|---|---|---|---|---|")
    for m in (2, 3, 4, 5, 6, 8, 12, 16, 24):
        s = micro_batches(m * 1536, seqs, mean, longest)
        print(
            f"| {m * 1536} | {s.count} | {s.padded} | {predict_update_gib(s.padded):.1f} | "
            f"{predict_update_s(s, tokens):.1f} | {predict_log_prob_gib(s.padded):.1f} | "
            f"{predict_log_prob_s(s, tokens):.1f} |"
        )
    for kind in ("update", "log_prob"):
        c = largest_cap(kind, budget)
        print(
            f"largest {kind} cap under the budget: {c.cap} ({c.multiple} x 1536): {c.peak_gib:.1f} GiB "
            f"(all sequences full length: {c.worst_gib:.1f} GiB)"
        )
    upd, lp = PROFILE_UPDATE_MULTIPLE * 1536, PROFILE_LOG_PROB_MULTIPLE * 1536
    print(f"profile: update cap {upd}, log-prob caps {lp}")
    print("predicted step:", ", ".join(f"{k} {v:.1f}" for k, v in predict_step(upd, lp).items()))
    print(
        f"generation on a {args.gpu_total_mib:.0f} MiB GPU at share 0.3: "
        f"{predict_generation_gib(args.gpu_total_mib):.1f} GiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

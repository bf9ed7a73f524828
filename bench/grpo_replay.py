"""A CPU replay of ``experiment=length_grpo``'s loop: does the tiny model learn the length reward?

    python bench/grpo_replay.py MODEL_DIR GSM8K_DIR [--steps 20] [--batch 4] [--n 8] [--lr 1e-3]

Not verl and not the kit's path (that is ``bench/gpu_smoke.sh``'s ``learn`` phase, on a GPU): plain
PyTorch and transformers with the experiment's sizes and verl's GRPO choices: group-normalised
advantages ``(r - mean) / (std + 1e-6)`` per prompt, token-mean policy-gradient loss (one update per
step, so the ratio is 1), KL loss 0.01 ``low_var_kl`` to the initial model, AdamW (weight decay 0.01),
grad clip 1.0; sampling at temperature 1 with transformers instead of vLLM; the reward is the kit's
``grpokit.tasks.length.reward.compute_score``. Prints the mean reward and response length per step,
then the means of the first and last 5 steps (the smoke check's windows). About 10 minutes for 20
steps on a busy 2-core CPU (docs/gpu-smoke.md has one run's figures).
"""

from __future__ import annotations

import argparse
import statistics

import pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpokit.tasks.length.reward import compute_score


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("data", help="prepared GSM8K folder (train.parquet)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--response", type=int, default=64)
    p.add_argument("--max-chars", type=int, default=256, help="the experiment's: 4 per response token")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    eos = [tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    rows = pq.read_table(f"{args.data}/train.parquet").to_pylist()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    means = []
    for step in range(args.steps):
        samples = []  # (prompt ids, response ids, reward, group)
        model.eval()
        with torch.no_grad():
            for g, row in enumerate(rows[step * args.batch : (step + 1) * args.batch]):
                text = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
                prompt = tok(text)["input_ids"]
                out = model.generate(
                    torch.tensor([prompt] * args.n), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                    max_new_tokens=args.response, eos_token_id=eos, pad_token_id=eos[-1],
                )  # fmt: skip
                for o in out:
                    resp = []
                    for t in o[len(prompt) :].tolist():
                        resp.append(t)
                        if t in eos:
                            break
                    decoded = tok.decode(resp, skip_special_tokens=True)  # as verl's reward loop does
                    score = compute_score("openai/gsm8k", decoded, None, None, max_chars=args.max_chars)["score"]
                    samples.append((prompt, resp, score, g))
        rewards = [s[2] for s in samples]
        adv = []
        for _, _, r, g in samples:
            group = [s[2] for s in samples if s[3] == g]
            adv.append((r - statistics.mean(group)) / (statistics.stdev(group) + 1e-6))
        model.train()
        opt.zero_grad()
        tokens = sum(len(s[1]) for s in samples)
        for (prompt, resp, _, _), a in zip(samples, adv, strict=True):
            ids, labels = torch.tensor([prompt + resp]), torch.tensor(resp)[:, None]
            lp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1 : -1], -1).gather(-1, labels)[:, 0]
            with torch.no_grad():
                rlp = torch.log_softmax(ref(ids).logits[0, len(prompt) - 1 : -1], -1).gather(-1, labels)[:, 0]
            kl = (torch.exp(rlp - lp) - (rlp - lp) - 1).clamp(-10, 10)  # verl's low_var_kl
            ((-a * lp + 0.01 * kl).sum() / tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        means.append(statistics.mean(rewards))
        length = statistics.mean(len(s[1]) for s in samples)
        print(f"step {step + 1} reward {means[-1]:.4f} response_length {length:.1f}", flush=True)
    w = min(5, len(means) // 2) or 1
    first, last = statistics.mean(means[:w]), statistics.mean(means[-w:])
    print(f"first {w} steps {first:.4f}, last {w} {last:.4f}, rise {last - first:+.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

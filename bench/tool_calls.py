"""Tool calls of ``experiment=tool_memory_grpo`` through verl's real parser, tools and ToolAgentLoop.

    python bench/tool_calls.py check --model MODEL_DIR [--rows 4] [--json OUT]
    python bench/tool_calls.py make-model --base TINY_DIR --out DIR [--steps 200] [--device cuda]

``check`` runs scripted assistant turns through verl's ``ToolAgentLoop.run`` with the experiment's
own settings (composed as ``launch/sweep.py`` composes a point: ``multi_turn.format=qwen3_coder``,
at most 3 assistant and 2 user turns, the packaged ``tool_config.yaml``), the ``qwen3_coder`` tool
parser, the task's two tools and its reward, with MODEL_DIR's tokenizer and chat template. A random
model rarely writes a well-formed tool call, so this is how the tools are checked on a GPU host.
Cases (each on ``--rows`` test rows):

    search_read_final  search(hint) -> read(target) -> "FINAL: <answer>"   num_turns 6, score 2.25
    read_wrong_id      read(unknown id) -> "FINAL: ?"                      num_turns 4, score 0.25
    no_tool_call       "FINAL: ?"                                          num_turns 2, score 0.25

Each case prints one line; the command exits 1 naming the first case, row and value that differ.

``make-model`` fine-tunes the random tiny model (``launch/make_tiny_model.py``) on the turns the
same loop asks for, so that under verl's sampling (temperature 1) it searches the memory with the
row's hint in its first turn and answers ``FINAL: unknown`` after the tool's reply: a "tool caller"
that makes the real vLLM rollout execute tools (``num_turns`` 4, one tool call, tool reward 0.25,
format reward 0.25; it learns nothing else). It then samples ``--verify-rows`` test rows through
the loop with the tuned model and fails when fewer than ``--min-calls`` of them call the tool.
Trains in rounds of ``--steps`` (at most ``--rounds``) until that share is reached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("tool_calls")


class CheckFailed(AssertionError):
    """A scripted case gave another result than the experiment's rules say."""


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise CheckFailed(message)


# -- the experiment's loop --------------------------------------------------------------------------
def experiment_config(model: Path):
    """verl's trainer config of one tool_memory point, composed as the kit composes it."""
    from grpokit.config.compose import compose_kit
    from grpokit.config.overrides import verl_overrides
    from grpokit.config.verl_schema import compose_verl

    cfg = compose_kit(
        ["experiment=tool_memory_grpo", "model=tiny", f"model.path={model}", "cluster=local", "cluster.gpus_per_node=1"]
    )
    return compose_verl(verl_overrides(cfg))


def load_tools(config) -> dict[str, Any]:
    from verl.tools.tool_registry import initialize_tools_from_config

    with contextlib.redirect_stdout(io.StringIO()):  # BaseTool prints its schema
        tools = initialize_tools_from_config(str(config.actor_rollout_ref.rollout.multi_turn.tool_config_path))
    return {t.name: t for t in tools}


@dataclass
class Turns:
    """Server double for verl's LLM server manager: answers each ``generate`` with ``reply(prompt_ids)``
    encoded with the rollout's tokenizer; records every (prompt_ids, reply ids) pair."""

    tokenizer: Any
    reply: Any  # callable(turn_index, prompt_ids) -> str (without eos) or list[int] (token ids)
    calls: list[tuple[list[int], list[int]]] = field(default_factory=list)

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        from verl.workers.rollout.replica import TokenOutput

        out = self.reply(len(self.calls), list(prompt_ids))
        ids = (
            self.tokenizer.encode(out + self.tokenizer.eos_token, add_special_tokens=False)
            if isinstance(out, str)
            else list(out)
        )
        self.calls.append((list(prompt_ids), ids))
        return TokenOutput(token_ids=ids, stop_reason="completed")


async def rollout(config, tools: dict[str, Any], tokenizer, row: dict[str, Any], server: Turns):
    """One ``ToolAgentLoop.run`` of ``row`` (a tool_memory parquet row) against ``server``."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.utils.dataset.rl_dataset import RLHFDataset

    loop = ToolAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(list(tools.values())),
    )
    extra = row["extra_info"]
    return await loop.run(
        {"temperature": 1.0}, raw_prompt=list(row["prompt"]), tools_kwargs=extra["tools_kwargs"], extra_info=extra
    )


def score(tokenizer, row: dict[str, Any], output) -> dict[str, float]:
    """What verl's naive reward-loop manager does: decode the response, merge extra_fields, score."""
    from grpokit.tasks.tool_memory.reward import compute_score

    solution = tokenizer.decode(output.response_ids, skip_special_tokens=True)
    extra = {**row["extra_info"], **output.extra_fields, "num_turns": output.num_turns}
    return compute_score(row["data_source"], solution, row["reward_model"]["ground_truth"], extra)


def call(name: str, **arguments: str) -> str:
    """One qwen3_coder tool call as the chat template writes it."""
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def test_rows(n: int) -> list[dict[str, Any]]:
    from grpokit.tasks.tool_memory.data import build_rows

    return build_rows(n, seed=0, split="test")


# -- check ------------------------------------------------------------------------------------------
CASES = {
    # name: (turns(row) -> list[str], expected num_turns, tool_rewards, score parts)
    "search_read_final": (
        lambda e: [
            "Let me search.\n" + call("search_memory", query=e["hint"]),
            call("read_memory", memory_id=e["target_id"]),
            f"The memory says so.\nFINAL: {e['target_answer']}",
        ],
        6,
        [0.25, 0.75],
        {"score": 2.25, "tool_reward": 1.0, "answer_reward": 1.0, "format_reward": 0.25, "tool_calls": 2.0},
    ),
    "read_wrong_id": (
        lambda e: [call("read_memory", memory_id="mem_zzzzzz"), "Nothing there.\nFINAL: ?"],
        4,
        [0.0],
        {"score": 0.25, "tool_reward": 0.0, "answer_reward": 0.0, "format_reward": 0.25, "tool_calls": 1.0},
    ),
    "no_tool_call": (
        lambda e: ["FINAL: ?"],
        2,
        [],
        {"score": 0.25, "tool_reward": 0.0, "answer_reward": 0.0, "format_reward": 0.25, "tool_calls": 0.0},
    ),
}


async def _check(model: Path, rows: int) -> dict[str, Any]:
    from transformers import AutoTokenizer

    config = experiment_config(model)
    mt = config.actor_rollout_ref.rollout.multi_turn
    tools = load_tools(config)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    print(
        f"loop: format={mt.format} max_assistant_turns={mt.max_assistant_turns} max_user_turns={mt.max_user_turns} "
        f"tools={sorted(tools)} tokenizer={model}"
    )
    results: dict[str, Any] = {}
    for case, (turns_of, num_turns, tool_rewards, parts) in CASES.items():
        for row in test_rows(rows):
            turns = turns_of(row["extra_info"])
            server = Turns(tokenizer, lambda i, _ids, t=turns: t[i])
            out = await rollout(config, tools, tokenizer, row, server)
            got = score(tokenizer, row, out)
            where = f"case {case}, test row {row['extra_info']['index']}"
            _expect(out.num_turns == num_turns, f"{where}: num_turns {out.num_turns}, expected {num_turns}")
            _expect(
                list(out.extra_fields["tool_rewards"]) == tool_rewards,
                f"{where}: tool_rewards {out.extra_fields['tool_rewards']}, expected {tool_rewards}",
            )
            _expect(got == parts, f"{where}: reward {got}, expected {parts}")
            _expect(
                len(server.calls) == len(turns), f"{where}: {len(server.calls)} generate calls, expected {len(turns)}"
            )
            if tool_rewards:  # the tool's reply went back to the model inside <tool_response>
                _expect("<tool_response>" in tokenizer.decode(server.calls[-1][0]), f"{where}: no <tool_response>")
        results[case] = {"rows": rows, "num_turns": num_turns, "tool_rewards": tool_rewards, **parts}
        print(f"{case}: {rows} rows, num_turns {num_turns}, tool_rewards {tool_rewards}, reward {parts}")
    print(
        f"ok tool calls: {len(CASES)} scripted cases x {rows} rows through ToolAgentLoop ({mt.format} parser, "
        "both tools, the reward): num_turns 6/4/2, scores 2.25/0.25/0.25 as expected"
    )
    return results


def cmd_check(args) -> None:
    results = asyncio.run(_check(Path(args.model), args.rows))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


# -- make-model -------------------------------------------------------------------------------------
FINAL_TURN = "FINAL: unknown"


def first_turn(extra: dict[str, Any]) -> str:
    return call("search_memory", query=extra["hint"])


async def _examples(config, tools, tokenizer, rows) -> list[tuple[list[int], list[int]]]:
    """(context ids, target ids) of both turns of every row, as the loop builds the contexts."""
    out = []
    for row in rows:
        turns = [first_turn(row["extra_info"]), FINAL_TURN]
        server = Turns(tokenizer, lambda i, _ids, t=turns: t[i])
        await rollout(config, tools, tokenizer, row, server)
        out.extend(server.calls)
    return out


class Trainer:
    """Supervised tuning of ``model`` on (context, target) token pairs; loss on the targets only."""

    def __init__(self, model, examples, lr: float, batch: int, device: str, pad_id: int):
        import random

        import torch

        self.model, self.examples, self.batch, self.device, self.pad_id = model, examples, batch, device, pad_id
        self.rng = random.Random(0)
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / 20))
        self.step = 0

    def train(self, steps: int) -> float:
        """``steps`` more optimizer steps; returns the last loss (mean over target tokens)."""
        import torch

        model, examples, batch, device, pad_id = self.model, self.examples, self.batch, self.device, self.pad_id
        rng, opt, sched = self.rng, self.opt, self.sched
        model.train()
        loss = float("nan")
        for _ in range(steps):
            self.step += 1
            step = self.step
            chosen = [examples[rng.randrange(len(examples))] for _ in range(batch)]
            width = max(len(c) + len(t) for c, t in chosen)
            ids = torch.full((batch, width), pad_id, dtype=torch.long)
            labels = torch.full((batch, width), -100, dtype=torch.long)
            mask = torch.zeros((batch, width), dtype=torch.long)
            for i, (ctx, tgt) in enumerate(chosen):
                seq = ctx + tgt
                ids[i, : len(seq)] = torch.tensor(seq)
                labels[i, len(ctx) : len(seq)] = torch.tensor(tgt)
                mask[i, : len(seq)] = 1
            out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
            opt.zero_grad()
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            loss = float(out.loss.detach())
            if step % 100 == 0:
                print(f"step {step}: loss {loss:.4f}", flush=True)
        model.eval()
        return loss


async def _verify(config, tools, tokenizer, model, rows, device: str) -> dict[str, Any]:
    """Sample each row through the loop with ``model`` (temperature 1, as verl's rollout)."""
    import torch

    def reply(_i: int, prompt_ids: list[int]) -> list[int]:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt_ids], device=device),
                attention_mask=torch.ones((1, len(prompt_ids)), dtype=torch.long, device=device),
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=64,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        return out[0, len(prompt_ids) :].tolist()

    turns, calls, scores = [], 0, []
    for row in rows:
        out = await rollout(config, tools, tokenizer, row, Turns(tokenizer, reply))
        turns.append(out.num_turns)
        calls += len(out.extra_fields["tool_rewards"])
        scores.append(score(tokenizer, row, out)["score"])
    return {
        "rows": len(rows),
        "rows_with_a_tool_call": sum(t > 2 for t in turns),
        "tool_calls": calls,
        "num_turns": turns,
        "mean_score": sum(scores) / len(scores),
    }


def cmd_make_model(args) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpokit.tasks.tool_memory.data import build_rows

    torch.manual_seed(0)
    base, out_dir = Path(args.base), Path(args.out)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.monotonic()
    config = experiment_config(base)
    tools = load_tools(config)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    examples = asyncio.run(_examples(config, tools, tokenizer, build_rows(args.train_rows, seed=0, split="train")))
    print(f"{len(examples)} turns from {args.train_rows} train rows in {time.monotonic() - t0:.1f} s", flush=True)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32).to(device)
    trainer = Trainer(model, examples, args.lr, args.batch, device, tokenizer.pad_token_id)
    # Rounds of --steps until --min-calls of the sampled rows call a tool (at most --rounds).
    for _ in range(args.rounds):
        loss = trainer.train(args.steps)
        result = asyncio.run(_verify(config, tools, tokenizer, model, test_rows(args.verify_rows), device))
        print(
            f"{trainer.step} steps (loss {loss:.4f}, {time.monotonic() - t0:.1f} s on {device}); "
            f"sampled through the loop: {json.dumps(result)}",
            flush=True,
        )
        if result["rows_with_a_tool_call"] >= args.min_calls * result["rows"]:
            break
    else:
        raise CheckFailed(
            f"only {result['rows_with_a_tool_call']} of {result['rows']} sampled rows called a tool after "
            f"{trainer.step} steps (--min-calls {args.min_calls}); train longer (--steps, --rounds)"
        )
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shutil.copytree(base, out_dir, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    model.to(torch.bfloat16).save_pretrained(str(out_dir))
    (out_dir / "tool_caller.json").write_text(json.dumps({"base": str(base), "steps": trainer.step, **result}))
    print(
        f"ok tool caller: {out_dir} after {trainer.step} steps, {result['rows_with_a_tool_call']} of "
        f"{result['rows']} sampled rows call a tool, {time.monotonic() - t0:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("check")
    s.add_argument("--model", required=True, help="model folder whose tokenizer and chat template the rollout uses")
    s.add_argument("--rows", type=int, default=4)
    s.add_argument("--json", default=None)
    s = sub.add_parser("make-model")
    s.add_argument("--base", required=True, help="the random tiny model (launch/make_tiny_model.py)")
    s.add_argument("--out", required=True)
    s.add_argument("--train-rows", type=int, default=64)
    s.add_argument("--steps", type=int, default=300, help="steps per round")
    s.add_argument("--rounds", type=int, default=4)
    s.add_argument("--batch", type=int, default=8)
    s.add_argument("--lr", type=float, default=3e-3)
    s.add_argument("--device", default=None, help="default: cuda when available")
    s.add_argument("--verify-rows", type=int, default=16)
    s.add_argument("--min-calls", type=float, default=0.8, help="share of sampled rows that must call a tool")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        {"check": cmd_check, "make-model": cmd_make_model}[args.cmd](args)
    except CheckFailed as exc:
        print(f"CHECK FAILED ({args.cmd}): {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

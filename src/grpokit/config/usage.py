"""``python launch/sweep.py --help``: the kit's own usage (groups, main keys, examples), then Hydra's flags."""

from __future__ import annotations

import re

from grpokit.paths import CONFIG_DIR, config_groups, group_files

MAIN_KEYS = """\
Main keys (key=value; a,b,c sweeps a key with -m):
  verl.<verl key>           any key of verl's ppo_trainer config, verl's own name, e.g.
                            verl.data.train_batch_size=8,16 verl.actor_rollout_ref.rollout.n=4,8
                            verl.data.max_response_length=512,1024 verl.actor_rollout_ref.actor.optim.lr=1e-6
                            (+verl.<key>=v adds a key verl leaves open, e.g. ...model.override_config.*)
  cluster.partition         Slurm partition (cluster=slurm); checked against the cluster before submission
  cluster.nodes, cluster.gpus_per_node, cluster.cpus_per_task, cluster.mem_gb
                            the Slurm request of every point (per node)
  cluster.timeout_min       time limit of one attempt (minutes); a longer point is requeued and resumes
  cluster.array_parallelism array tasks running at once
  cluster.constraint        node features (sbatch --constraint); cluster.gpu_constraints.<profile>=<features>
                            maps each hardware profile to its GPUs' node features
  cluster.python            the Python the job runs (another venv's or a container's); its packages
                            are checked against each point's needs before submission
  cluster.signal_delay_s    seconds before the time limit at which the job checkpoints and requeues
  cluster.additional_parameters.<sbatch option>=v   more sbatch options (submitit's names;
                            hydra.launcher.<name>=v is taken as cluster.<name>=v)
  experiment.data_dir       the prepared data (launch/prepare_data.py)
  model.path                the model's folder (launch/download.py, launch/make_tiny_model.py)
  sweep_name, logs_root     the sweep folder <logs_root>/<sweep_name>/
  checkpoint_root           checkpoints outside the run folders (a scratch file system)
  dry_run=true              validate every point and write each one's verl command and Slurm
                            request to <sweep folder>/dry_run.md; submit nothing
  wait=true                 block until every point is final
  resume=true               re-use sweep_name's folder: refused when a point's settings changed,
                            else resubmits the points not completed/queued/running (from checkpoints)
  after=[merge,eval]        per point, a job chained after it: merge its checkpoint, compare base
                            and trained model on the test file (chain.* its settings)
  halving.rungs=[2,4]       successive halving: train every point to 2 steps, keep the best
                            halving.keep=0.5 by halving.metric=val_acc (halving.mode=max), and so on
  use_live_code=true        jobs import the live code instead of the sweep's snapshot in <sweep>/code
  rehearse=true             rehearse the sweep without CUDA: the same Slurm path (arrays, sidecars,
                            Ray, checkpoints, requeues, after=[merge,eval]) with the kit's stand-ins
                            for verl's trainer and vllm serve
  runtime.pruning.<rule>=v  stop a point on RL failure signs (kl_max, entropy_min, reward_stuck_at,
                            nonfinite_steps); runtime.pruning=null turns the rules off
  runtime.wandb_mode        online | offline | disabled (with verl.trainer.logger=[console,wandb])
  runtime.max_timeout_requeues, runtime.save_deadline_s, runtime.ray_start_timeout_s
"""

EXAMPLES = """\
Examples:
  python launch/sweep.py model=tiny                          # the default point, on this machine
  python launch/sweep.py -m cluster=slurm cluster.partition=gpu \\
      verl.data.train_batch_size=8,16 verl.actor_rollout_ref.rollout.n=4,8
  python launch/sweep.py -m cluster=slurm_local model=tiny   # the bundled local test cluster
  python launch/sweep.py -m cluster=slurm dry_run=true ...   # check everything, submit nothing
  python launch/sweep.py --cfg job                           # the composed config (add --resolve)
  python launch/status.py logs/<sweep>                       # then: report.py, resubmit.py
"""


def _first_comment(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("# ").rstrip()
    return ""


def _short(text: str, width: int = 88) -> str:
    if len(text) <= width:
        return text
    return text[: text.rfind(" ", 0, width - 3)].rstrip(",;:") + " ..."


def _flags(text: str) -> str:
    """Hydra's flags, one line each (the shell-completion recipe is left to --hydra-help)."""
    return "\n".join(line for line in text.splitlines() if line.startswith(("-", "Overrides")))


def _defaults() -> dict[str, str]:
    text = (CONFIG_DIR / "config.yaml").read_text()
    return dict(re.findall(r"^\s*-\s*(\w+):\s*(\w+)\s*(?:#.*)?$", text, re.MULTILINE))


def groups_text() -> str:
    """Each config group with its options, the default marked, and each option's first comment line."""
    defaults = _defaults()
    lines = ["Config groups (group=option; * is the default):"]
    for group in sorted(config_groups()):
        lines.append(f"  {group}:")
        for name, option in group_files(group).items():  # _x: shared parts, left out
            mark = "*" if defaults.get(group) == name else " "
            lines.append(f"    {mark}{name:<22} {_short(_first_comment(option.read_text()))}")
    return "\n".join(lines)


def usage() -> str:
    """The whole ``--help`` text: the kit's usage first, Hydra's own flags after."""
    from grpokit.config.hydra_internals import hydra_flags_help

    hydra_flags = _flags(hydra_flags_help())
    return "\n".join(
        [
            "usage: python launch/sweep.py [-m] [group=option ...] [key=value[,value...] ...]",
            "",
            "Compose verl GRPO points from the kit's config groups and verl's own keys, validate every",
            "point (verl's schema and validate_config, data, model, lengths, the Slurm request), then",
            "run them here (cluster=local) or submit them to Slurm as job arrays (cluster=slurm).",
            "",
            groups_text(),
            "",
            MAIN_KEYS,
            EXAMPLES,
            "Hydra's flags (python launch/sweep.py --hydra-help for Hydra's own help):",
            hydra_flags,
        ]
    )

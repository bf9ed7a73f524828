"""Is the checkpoint folder one folder for every node of the job?

verl saves a checkpoint from every rank: each rank writes its own ``model/optim/extra_state``
shards, rank 0 adds ``fsdp_config.json``, ``data.pt`` and the tracker. With
``trainer.default_local_dir`` (the kit's ``checkpoint_root``) on a node-local disk (``/tmp``, a
local NVMe scratch, a per-node ``$TMPDIR``), each node keeps only its own ranks' shards: no node
ever holds a complete checkpoint, so every requeue sets all steps aside and training silently
restarts from step 0. A job on several nodes therefore checks, before the trainer starts and
before the folder is touched: the driver writes a token file on its node and every other node
reads it back through ``srun --overlap`` (``python -m grpokit.runtime.processes.shared_fs``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import socket
import subprocess
import time
from pathlib import Path

from grpokit.slurm import runner
from grpokit.slurm.nodes import srun_step
from grpokit.slurm.task import JobEnv

#: Seconds a node keeps looking for the token (covers attribute caches of network file systems).
VISIBLE_WITHIN_S = 10.0
_MARK = "GRPOKIT_SHARED_FS "


def probe_command(others: list[str], path: Path, token: str, within_s: float) -> list[str]:
    """``srun`` running the check once on each node of ``others`` (inside the job's allocation)."""
    return srun_step(others, "grpokit.runtime.processes.shared_fs", str(path), token, f"--within={within_s:g}")


def unshared_nodes(folder: Path, others: list[str], within_s: float = VISIBLE_WITHIN_S) -> dict[str, str] | None:
    """Which of ``others`` do not see ``folder`` as this node sees it.

    Returns:
        ``{node: what it saw}`` for each node that does not see this node's token file (empty when
        every node sees it), or None when the check itself could not run (``srun`` missing or
        failing): the caller goes on, the check is then unknown rather than failed.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    probe = folder / f".grpokit-shared-check-{JobEnv.from_env().job_id or 'local'}-{token[:8]}"
    probe.write_text(token)
    try:
        out = runner.run(probe_command(others, probe, token, within_s), timeout_s=within_s + 120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    seen: dict[str, dict] = {}
    for line in out.stdout.splitlines():
        if line.startswith(_MARK):
            with contextlib.suppress(ValueError):
                answer = json.loads(line[len(_MARK) :])
                seen[answer["node"]] = answer
    if not seen:
        return None
    missing = {n: "no answer from the node" for n in others if n not in seen}
    missing.update({n: a["detail"] for n, a in seen.items() if not a["visible"]})
    return missing


def problem(folder: Path, head: str, missing: dict[str, str]) -> str:
    """The one-paragraph reason a job with an unshared checkpoint folder stops with."""
    seen = "; ".join(f"{node}: {what}" for node, what in sorted(missing.items()))
    return (
        f"checkpoint folder {folder} is not shared between the job's nodes: a file written there on {head} "
        f"is not visible on {', '.join(sorted(missing))} ({seen}). verl writes each rank's checkpoint shards on "
        "its own node, so no node would hold a complete checkpoint and every requeue would restart from step 0. "
        "Fix: set checkpoint_root (or logs_root, when checkpoint_root is null) to a file system every node "
        "mounts (e.g. the cluster's shared scratch or project space), not /tmp or a node-local disk."
    )


def _check(path: Path, token: str, within_s: float) -> tuple[bool, str]:
    deadline = time.monotonic() + within_s
    while True:
        try:
            text = path.read_text()
            if text == token:
                return True, "sees the token"
            detail = f"{path} holds another token (a different folder under the same path)"
        except FileNotFoundError:
            detail = f"{path} does not exist" if path.parent.is_dir() else f"folder {path.parent} does not exist there"
        except OSError as exc:
            detail = f"cannot read {path}: {exc}"
        if time.monotonic() >= deadline:
            return False, detail
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    """``python -m grpokit.runtime.processes.shared_fs <token file> <token> [--within S]``: one line of JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("path", type=Path)
    parser.add_argument("token")
    parser.add_argument("--within", type=float, default=VISIBLE_WITHIN_S)
    args = parser.parse_args(argv)
    visible, detail = _check(args.path, args.token, args.within)
    node = JobEnv.from_env().nodename or socket.gethostname()
    print(_MARK + json.dumps({"node": node, "visible": visible, "detail": detail}), flush=True)


if __name__ == "__main__":
    main()

"""What ``rehearse=true`` changes in a point, beyond the trainer (docs/rehearsal.md): pure decisions.

- :func:`rehearsal_sidecars`: every sidecar of ``kind: vllm`` without a ``command`` (Memory-RL's
  ``answer_llm``) runs the kit's rehearsal answer server (:mod:`grpokit.rehearsal.answer_server`)
  under the same served name; its kind stays ``vllm`` (its key in ``VLLM_API_KEY``, the memory
  server pointed at it as before). A sidecar with a ``command`` of its own is kept as given.
- :func:`rehearsal_trainer_env`: with ``merge`` in ``after``, the rehearsal trainer saves the model's
  real weights as verl's world-size-1 FSDP shard (``FAKE_TRAINER_REAL_WEIGHTS=1``), so the chained
  job runs verl's real model merger on it.
- :func:`rehearsal_chain_refusal`: why a rehearsal point cannot chain ``merge`` (its trainer world
  is not one GPU), or None.
"""

from __future__ import annotations

import dataclasses

from grpokit.config.schema import SidecarConf
from grpokit.rehearsal import ANSWER_SERVER_CMD, REAL_WEIGHTS_ENV


def answer_server_command(served_model_name: str) -> list[str]:
    """The rehearsal answer server's ``sidecars.<name>.command`` template serving ``served_model_name``
    (``{host}`` and ``{port}`` left for the job to fill in; braces in the name are escaped)."""
    name = served_model_name.replace("{", "{{").replace("}", "}}")
    return [name if part == "{name}" else part for part in ANSWER_SERVER_CMD]


def rehearsal_sidecars(sidecars: dict[str, SidecarConf]) -> dict[str, SidecarConf]:
    """``sidecars`` with each ``kind: vllm`` one (no ``command``) served by the rehearsal answer server;
    the others unchanged. A vLLM sidecar without ``served_model_name`` is served as its own name."""
    out = {}
    for name, spec in sidecars.items():
        if spec.kind == "vllm" and not spec.command:
            spec = dataclasses.replace(spec, command=answer_server_command(str(spec.served_model_name or name)))
        out[name] = spec
    return out


def rehearsal_trainer_env(steps: tuple[str, ...]) -> dict[str, str]:
    """The rehearsal trainer's extra environment for the chain ``steps`` (``after``): real weights
    in every checkpoint when ``merge`` will read them, else nothing (a save then costs no disk)."""
    return {REAL_WEIGHTS_ENV: "1"} if "merge" in steps else {}


def rehearsal_chain_refusal(point: str, steps: tuple[str, ...], nnodes: int, gpus_per_node: int) -> str | None:
    """One line when a rehearsal point's ``after`` cannot run, else None.

    ``merge`` reads the rehearsal checkpoint's real weights, which the rehearsal trainer writes as
    verl's world-size-1 FSDP shard: a trainer world (``nnodes`` x ``gpus_per_node``, verl's
    ``trainer.nnodes`` x ``trainer.n_gpus_per_node``) other than 1 is refused.
    """
    world = int(nnodes) * int(gpus_per_node)
    if "merge" not in steps or world == 1:
        return None
    return (
        f"[{point}] after=[{','.join(steps)}] with rehearse=true: the rehearsal checkpoint holds the model's "
        f"real weights as verl's world-size-1 FSDP shard, but this point's trainer world is {world} "
        f"(trainer.nnodes={nnodes} x trainer.n_gpus_per_node={gpus_per_node}); rehearse the chain with "
        "cluster.nodes=1 cluster.gpus_per_node=1, or drop after"
    )

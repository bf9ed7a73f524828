"""The memory server as a sidecar kind (``sidecars.<name>.kind: memory_server``): its command line
from :class:`~grpokit.tasks.memalpha.settings.ServerOptions`' fields, its key variables, its record
for the task registry (:data:`MEMORY_SERVER`). Light: the server itself runs in its own process.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from grpokit.config.task_registry import SidecarKind
from grpokit.tasks.memalpha.settings import ANSWER_KEY_ENV, SERVER_KEY_ENV, MemoryServerSidecar, ServerOptions, flag

#: The module the sidecar runs (``python -m``).
SERVER_MODULE = "grpokit.tasks.memalpha.server"


def sidecar_command(sidecar: Any, others: Mapping[str, Any]) -> list[str]:
    """The memory server sidecar's argv: ``python -m`` :data:`SERVER_MODULE` with its host, port, the
    answer sidecar's URL and served model, then each :class:`ServerOptions` field's flag (a None
    value left off). ``sidecar.spec.answer`` names the answer sidecar in ``others``."""
    spec = sidecar.spec
    answer = others[spec.answer]
    argv = [sys.executable, "-m", SERVER_MODULE, "--host", sidecar.host, "--port", str(sidecar.port)]
    argv += ["--answer-base-url", f"{answer.url}/v1", "--answer-model", str(answer.spec.served_model_name)]
    for f in dataclasses.fields(ServerOptions):
        value = getattr(spec, f.name)
        if value is not None and value != "":
            argv += [flag(f.name), str(value)]
    return argv


#: The memory server as a sidecar (``sidecars.<name>.kind: memory_server``).
MEMORY_SERVER = SidecarKind(
    name="memory_server",
    settings=MemoryServerSidecar,
    command=sidecar_command,
    key_env=SERVER_KEY_ENV,
    peer_keys=lambda spec: {ANSWER_KEY_ENV: spec.answer},
)

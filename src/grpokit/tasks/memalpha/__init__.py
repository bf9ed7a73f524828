"""Memory-RL (Mem-α, docs/memalpha-notes.md): data, the memory server (a sidecar kind) and the reward."""

from grpokit.config.task_registry import Task
from grpokit.tasks.memalpha.sidecar import MEMORY_SERVER

#: What the task brings (grpokit.config.task_registry).
TASK = Task(
    name="memalpha",
    data="grpokit.tasks.memalpha.data",
    reward="grpokit.tasks.memalpha.reward:compute_score",
    sidecar_kinds=(MEMORY_SERVER,),
)

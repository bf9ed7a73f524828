"""Tool memory: a multi-turn task whose model stores and recalls facts through tools (tools, data, reward)."""

from grpokit.config.task_registry import Task

#: What the task brings (grpokit.config.task_registry).
TASK = Task(
    name="tool_memory",
    data="grpokit.tasks.tool_memory.data",
    reward="grpokit.tasks.tool_memory.reward:compute_score",
)

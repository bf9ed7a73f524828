"""GSM8K: grade-school math word problems (verl's row format; verl's own gsm8k score)."""

from grpokit.config.task_registry import Task

#: What the task brings (grpokit.config.task_registry).
TASK = Task(name="gsm8k", data="grpokit.tasks.gsm8k.data")

"""A length reward on GSM8K prompts: the shorter the response, the higher the score. A reward the
random-weight tiny model can learn in a few dozen GRPO steps (it learns to end early and to prefer
short tokens), so a run with it shows that the whole loop learns (``experiment=length_grpo``)."""

from grpokit.config.task_registry import Task

#: What the task brings (grpokit.config.task_registry).
TASK = Task(name="length", reward="grpokit.tasks.length.reward:compute_score")

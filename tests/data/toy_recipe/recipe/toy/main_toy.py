"""Entry of the kit's toy test recipe: composes ``config/toy_trainer.yaml`` (verl's ``ppo_trainer`` plus
the ``toy.*`` keys), sets up the recipe's reward scaling and hands the config to verl's PPO driver.

Never run by the tests: they read it with ``ast`` and rehearse it with the kit's stand-in trainer.
"""

import hydra
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

from .toy_reward import use_reward_scale


@hydra.main(config_path="config", config_name="toy_trainer", version_base=None)
def main(config):
    use_reward_scale(config.toy.reward_scale)
    run_ppo(config, task_runner_class=TaskRunnerV1)


if __name__ == "__main__":
    main()

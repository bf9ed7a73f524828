"""The baseline of bench_submit.py: a bare Hydra app with hydra-submitit-launcher, no validation."""

import hydra
from omegaconf import DictConfig


@hydra.main(config_path=".", config_name="bare", version_base=None)
def main(cfg: DictConfig) -> int:
    return int(cfg.batch) * int(cfg.n)


if __name__ == "__main__":
    main()

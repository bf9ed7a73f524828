# The kit's two entry points (README.md): `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# tiny: the random-weight smoke model, built here (no hub, no download); qwen3_5_0_8b: the
# reference run's model, fetched from ModelScope.
MODEL  ?= tiny
ARGS   ?=
SHARED ?= ../shared

comma := ,
# A machine where nvidia-smi answers trains: it gets the training extra (verl[vllm], CUDA torch).
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
# A downloaded model needs a hub client (the `hub` extra: modelscope); the smoke model does not.
EXTRAS := dev$(if $(HAS_GPU),$(comma)train)$(if $(filter-out tiny,$(MODEL)),$(comma)hub)
# The smoke model's point stops after 2 training steps and a checkpoint (on a machine without a
# GPU the job runs every stage but training and ends in state skipped_no_gpu).
RUN_ARGS_tiny := verl.trainer.total_training_steps=2 verl.trainer.save_freq=2

.PHONY: install lock run test cluster lint verl-lowest

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# The install takes its versions from the lock (constraints/, README "Installing"): cpu.txt, the
# exact set `make test` passed with, on a machine without a GPU (torch's CPU build first, at the
# lock's version); gpu.txt, the GPU bundle's tested set, where nvidia-smi answers (the training extra
# brings verl[vllm] with the CUDA torch vLLM pins). The install is editable, so code edits need no
# re-install: pip runs again only when pyproject.toml or the lock changed or the extras differ (the
# stamp's name holds them), not on every `make run`.
LOCK  := constraints/$(if $(HAS_GPU),gpu,cpu).txt
STAMP := $(VENV)/.grpokit-installed-$(subst $(comma),-,$(EXTRAS))
install: $(STAMP)
$(STAMP): pyproject.toml $(LOCK) | $(PY)
	$(if $(HAS_GPU),,$(PY) -m pip install -q -c $(LOCK) torch)
	$(PY) -m pip install -q -c $(LOCK) -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.grpokit-installed-* && touch $@

# Moves the lock forward: a fresh environment resolves the newest versions pyproject.toml's ranges
# allow (the packages shared with the GPU bundle held at gpu.txt's), `pip check`s them and writes
# constraints/cpu.txt. Then run `make test`: the lock lands only with a passing suite.
LOCK_VENV := .venv-lock
lock:
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install -q 'torch$(shell sed -n 's/^torch\(==.*\)/\1/p' constraints/cpu.txt)'
	$(LOCK_VENV)/bin/python -m pip install -q -c constraints/gpu.txt -e '.[dev,hub,wandb]'
	$(LOCK_VENV)/bin/python -m pip check
	$(LOCK_VENV)/bin/python -m pip freeze --exclude-editable > $(LOCK_VENV)/freeze.txt
	$(PYTHON) constraints/lock.py $(LOCK_VENV)/freeze.txt
	rm -rf $(LOCK_VENV)

# Prepare real GSM8K (../shared/data/gsm8k if present, else the hub), build or fetch the model,
# run the default sweep point on this machine (cluster=local; ARGS="cluster=slurm ..." to submit).
run: install
	@if [ -d $(SHARED)/data/gsm8k ]; then src=$(SHARED)/data/gsm8k; else src=openai/gsm8k; fi; \
	  $(PY) launch/prepare_data.py gsm8k --source $$src --out data/gsm8k
	$(PY) launch/download.py model=$(MODEL)
	$(PY) launch/sweep.py model=$(MODEL) $(RUN_ARGS_$(MODEL)) $(ARGS)

cluster:
	bash slurm/local_cluster.sh up

# The lowest verl the kit is tested with (constraints/verl-lowest.txt: version and hash), as a second
# job environment for the tests: the wheel unpacked without dependencies into .verl-lowest/<v>/site
# and a python wrapper that puts it first on PYTHONPATH (how a fork's checkout on PYTHONPATH looks).
# Built once per version (seconds; pip's cache keeps the wheel).
VERL_LOWEST     := $(shell sed -n 's/^verl==\([^ ]*\).*/\1/p' constraints/verl-lowest.txt)
VERL_LOWEST_DIR := .verl-lowest/$(VERL_LOWEST)
verl-lowest: $(VERL_LOWEST_DIR)/python
$(VERL_LOWEST_DIR)/python: constraints/verl-lowest.txt | $(PY)
	rm -rf $(VERL_LOWEST_DIR) && mkdir -p $(VERL_LOWEST_DIR)
	$(PY) -m pip download -q --no-deps --require-hashes -r constraints/verl-lowest.txt -d $(VERL_LOWEST_DIR)/wheel
	$(PY) -m pip install -q --no-deps --no-index --require-hashes -r constraints/verl-lowest.txt \
	    --find-links $(VERL_LOWEST_DIR)/wheel --target $(VERL_LOWEST_DIR)/site
	printf '#!/bin/sh\nPYTHONPATH="%s$${PYTHONPATH:+:$$PYTHONPATH}" exec "%s" "$$@"\n' \
	    "$(abspath $(VERL_LOWEST_DIR))/site" "$(abspath $(PY))" > $@.tmp && chmod +x $@.tmp && mv $@.tmp $@

# Three parts. The tests that submit no Slurm job (tests/unit, and the integration tests not marked
# slurm) start in the background; the tests marked cluster_exclusive (they preempt whole nodes, set
# a node down or need one node's GPUs to themselves) have the cluster alone, one at a time; as soon
# as they end, three pytest workers (one test file each, the longest files first: tests/conftest.py
# LONGEST_FIRST) share the cluster for the other integration tests, while the first part may still
# run. Its output comes last; the target fails if any part failed.
# The three pytest commands share one folder of set-up built once (tiny model, GSM8K parquet:
# tests/conftest.py::built_once), so verl's verdict on a config is asked once for the whole run.
test: export GRPOKIT_TEST_SHARED_DIR := $(CURDIR)/.pytest-shared
test: export GRPOKIT_EXPECT_LOCK := $(LOCK)
test: export GRPOKIT_VERL_LOWEST_PYTHON := $(CURDIR)/$(VERL_LOWEST_DIR)/python
test: install verl-lowest cluster
	@rm -rf .pytest-shared
	@$(PY) -m pytest -q -p no:cacheprovider -m "not slurm and not cluster_exclusive" tests/unit tests/integration \
	    --durations=5 > .pytest-no-jobs.log 2>&1 & nojobs=$$!; \
	  trap 'kill $$nojobs 2>/dev/null; exit 130' INT TERM; \
	  $(PY) -m pytest -q -m cluster_exclusive tests/integration --durations=10; excl=$$?; \
	  $(PY) -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder -m "slurm and not cluster_exclusive" \
	    tests/unit tests/integration --durations=20; shared=$$?; \
	  wait $$nojobs; nojobs_rc=$$?; echo "--- the tests that submit no job:"; cat .pytest-no-jobs.log; \
	  test $$excl -eq 0 -a $$shared -eq 0 -a $$nojobs_rc -eq 0

lint:
	$(PY) -m ruff check src launch tests bench constraints

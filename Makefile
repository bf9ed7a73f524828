# The kit's two entry points (README.md): `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
MODEL  ?= qwen3_5_0_8b
ARGS   ?=
SHARED ?= ../shared

.PHONY: install run test cluster lint

# torch is pinned to the CPU build this kit's login nodes and CI use; training nodes install
# `pip install -e '.[train]'`, which brings verl[vllm] with its CUDA torch.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'

# Prepare real GSM8K (../shared/data/gsm8k if present, else the hub), fetch the model, run the
# default sweep point on this machine (cluster=local; ARGS="cluster=slurm ..." to submit).
run: install
	@if [ -d $(SHARED)/data/gsm8k ]; then src=$(SHARED)/data/gsm8k; else src=openai/gsm8k; fi; \
	  $(PY) launch/prepare_data.py gsm8k --source $$src --out data/gsm8k
	$(PY) launch/download.py model=$(MODEL)
	$(PY) launch/sweep.py model=$(MODEL) $(ARGS)

cluster:
	bash slurm/local_cluster.sh up

test: install cluster
	$(PY) -m pytest -q

lint:
	$(PY) -m ruff check launch tests bench

# Two commands build everything from the repository's own files:
#   make evaluate   the seven scenarios, every scheduler, report in results/
#   make test       the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
WARM   := $(VENV)/.warm

.PHONY: evaluate test lint clean

# The venv is rebuilt when pyproject.toml or constraints.txt changes. torch is pinned to the CPU
# build that lies on local disk; see the README for a CUDA build. constraints.txt pins the packages
# whose versions the tests' golden values depend on (onnxruntime, numpy, numba, hypothesis). The ray extra
# is installed so that `make test` runs the Ray tests too (they start a local
# Ray and a two-node cluster on this machine and stop them; docs/fanout.md).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,ray]"
	touch $(STAMP)

# Once the venv is built, `gpualloc warm-up` compiles the learned planner's decoder and the batched engine into numba's disk cache
# (gpu_env/__pycache__), so that no first plan waits for the compiler (docs/learned-mode.md#install); again when
# the compiled source changes. A failed warm-up leaves the venv's stamp alone and runs again next time.
$(WARM): $(STAMP) gpu_env/listsched.py gpu_env/placement.py gpu_env/stepwise.py gpu_env/batch/_kernels.py
	$(BIN)/gpualloc warm-up
	touch $(WARM)

evaluate: $(WARM)
	$(BIN)/python evaluate.py

test: $(WARM)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache

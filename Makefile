# The two set-up commands of the README: `make demo` and `make test`.
# Each creates .venv and installs what it needs (scripts/bootstrap.sh).
VENV := .venv
BIN := $(VENV)/bin
SERVEKIT := $(BIN)/servekit

.PHONY: demo test lint typecheck unit sim-demo clean

# Fresh machine -> real vLLM on the CPU: tiny model, local/1p1d beside a single
# reference instance, PD answers checked byte for byte, everything stopped.
demo:
	scripts/bootstrap.sh engine
	$(SERVEKIT) layouts check
	$(SERVEKIT) render a3/1p1d --out out/a3-1p1d
	$(SERVEKIT) demo

test:
	scripts/bootstrap.sh engine tools
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest

unit:
	scripts/bootstrap.sh
	$(BIN)/pytest -m "not vllm and not tools"

lint:
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) out runs .pytest_cache .mypy_cache .ruff_cache

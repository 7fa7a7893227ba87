# The two set-up commands of the README: `make demo` and `make test`.
# Each creates .venv and installs what it needs (scripts/bootstrap.sh).
VENV := .venv
BIN := $(VENV)/bin
SERVEKIT := $(BIN)/servekit
# pytest-xdist: tests spread over this many worker processes (auto: one per core);
# real-vLLM tests run one after another on one worker (tests/helpers/parallel.py).
WORKERS ?= auto
PYTEST := $(BIN)/pytest -n $(WORKERS) --dist loadgroup
# Each run's junit report, summed by scripts/test_times.py (the slowest tests).
REPORT := runs/test-reports/pytest.xml

.PHONY: demo sim-demo test lint unit times clean

# Fresh machine -> real vLLM on the CPU: the tiny model is built offline,
# local/1p1d (real KV handoff through vLLM's NixlConnector) comes up beside a
# single-instance reference, the acceptance matrix and the benchmarks run, the
# release report is written and its path printed, everything is torn down.
# Then `servekit demo` shows the decoder's prompt tokens came over the transfer
# (external_kv_transfer == the prompt tokens sent, local_compute 0) and the
# answers equal the single engine's byte for byte; it fails otherwise.
demo:
	scripts/bootstrap.sh engine
	$(SERVEKIT) layouts check
	$(SERVEKIT) verify local/1p1d
	$(SERVEKIT) demo

# The real A3 catalog layout dry-run end to end on simulated engines.
sim-demo:
	scripts/bootstrap.sh
	$(SERVEKIT) verify a3/1p1d --engine sim

test:
	scripts/bootstrap.sh engine tools
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/mypy
	$(PYTEST) --junitxml=$(REPORT) -o junit_family=xunit1

# The inner loop: the fast tests; not real vLLM, the Debian tools, or the tests
# marked slow (simulated clusters end to end, fuzz campaigns). Budget: 5 minutes.
unit:
	scripts/bootstrap.sh
	$(PYTEST) -m "not vllm and not tools and not slow"

# Where the time went in the last `make test`: the 25 slowest tests and files.
times:
	$(BIN)/python scripts/test_times.py --top 25 --from $(REPORT)

lint:
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) out runs .pytest_cache .mypy_cache .ruff_cache

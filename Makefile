# calib-pipeline: `make run` and `make test` bootstrap .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Telemetry must never block or prompt (the machines may be offline).
export DO_NOT_TRACK := 1
export KEDRO_DISABLE_TELEMETRY := true
export PYTHONWARNINGS := ignore::DeprecationWarning

# make run ENV=cifar10 PIPELINE=focal: any conf/<env> folder and registered pipeline
ENV ?= local
PIPELINE ?= focal_meta

.PHONY: install run run-all replicate test test-fast notebook viz viz-build mlflow-ui bench prune clean-outputs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=24"
	$(BIN)/pip install --quiet -e ".[test,dask]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)  ## the main job on the embedded default (digits, CPU)
	$(BIN)/kedro run --env=$(ENV) --pipelines=$(PIPELINE)

run-all: $(STAMP)  ## every study
	$(BIN)/kedro run --env=$(ENV)

# make replicate ENV=fashion_mnist: each study of ENV that checks its paper's claims, one
# `kedro run` after another in the parameters' order (focal_meta first; an interrupted study
# resumes where it stopped), then the replication report over their claims
# (docs/replication.md). KEDRO_ARGS is added to every study's run.
KEDRO_ARGS ?=
replicate: $(STAMP)
	studies="$$($(BIN)/python -c 'import sys; from calib_pipeline.pipeline_registry import claims_studies; print(*claims_studies(sys.argv[1]))' $(ENV))" || exit 1; \
	for study in $$studies; do $(BIN)/kedro run --env=$(ENV) --pipelines=$$study $(KEDRO_ARGS) || exit 1; done; \
	$(BIN)/kedro run --env=$(ENV) --pipelines=replication

# Test processes (pytest-xdist): each test process keeps torch at one thread (tests/conftest.py),
# so 2 fill CI's 2 cores (both ways measured: docs/performance.md); `make test TEST_WORKERS=8`
# on a bigger machine (~1.6 GB of memory each). Whole files go to one process (--dist
# loadfile): a module's shared fixture (one kedro run) runs once, not once per process.
TEST_WORKERS ?= 2

.PHONY: lint
lint: $(STAMP)  ## ruff (pinned in the test extra): its rules (pyproject.toml) and the formatting
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

test: $(STAMP) lint  ## lint, then the whole suite (unit, pipeline, end-to-end kedro run, notebook)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow"

notebook: $(STAMP)  ## Jupyter over the catalog of ENV (installs the notebook extra on first use)
	$(BIN)/python -c "import notebook, ipywidgets" 2>/dev/null || $(BIN)/pip install --quiet -e ".[notebook]"
	$(BIN)/kedro jupyter notebook --env=$(ENV)

# make viz PIPELINE=__default__: every study at once, a graph several screens wide
viz: $(STAMP)  ## kedro-viz of PIPELINE (default: make run's study) in ENV at http://127.0.0.1:4141
	$(BIN)/kedro viz run --no-browser --host 127.0.0.1 --env=$(ENV) --pipeline=$(PIPELINE)

viz-build: $(STAMP)
	$(BIN)/kedro viz build

# Where `kedro run` tracks: MLFLOW_TRACKING_URI if set, else mlflow.db at the project root.
TRACKING_URI := $(or $(MLFLOW_TRACKING_URI),sqlite:///$(CURDIR)/mlflow.db)

# MLflow 3.17's UI opens an experiment on its GenAI pages unless the address says
# workflowType=machine_learning (or "Model training" was clicked once in that browser)
mlflow-ui: $(STAMP)
	@$(BIN)/python -c "import mlflow; \
	  e = mlflow.MlflowClient('$(TRACKING_URI)').get_experiment_by_name('calib-pipeline'); \
	  print('runs: http://127.0.0.1:5000/#/experiments' \
	        + (f'/{e.experiment_id}' if e else '') + '?workflowType=machine_learning')"
	$(BIN)/mlflow ui --backend-store-uri $(TRACKING_URI) --host 127.0.0.1

bench: $(STAMP)  ## performance ratios (see benchmarks/README.md)
	for script in benchmarks/bench_*.py; do $(BIN)/python $$script || exit 1; done

KEEP ?= 3
prune: $(STAMP)  ## keep the newest KEEP versions of every artifact and their MLflow runs (RESUME=1: and prune finished resume states); dry run unless APPLY=1
	$(BIN)/python -m calib_pipeline.retention --keep $(KEEP) $(if $(RESUME),--resume-states) $(if $(APPLY),--apply)

# The data folder of `kedro run` (CALIB_DATA_DIR, else data/): cleaning the wrong one would
# keep the artifacts and still delete the MLflow store.
DATA_DIR := $(or $(CALIB_DATA_DIR),data)

clean-outputs:  ## delete generated data (of CALIB_DATA_DIR if set), run logs and, for data/ with the default store, the local MLflow store (keeps raw data); irreversible
	for folder in 02_intermediate 06_models 07_model_output 08_reporting; do \
	  if [ -d $(DATA_DIR)/$$folder ]; then find $(DATA_DIR)/$$folder -mindepth 1 ! -name .gitkeep -delete || exit 1; fi; \
	done
	rm -rf $(DATA_DIR)/.save_versions $(DATA_DIR)/logs
	@# The project's mlflow.db also tracks the runs of every other data folder: delete it only
	@# when cleaning data/ itself, and never a store named by MLFLOW_TRACKING_URI.
	@if [ -z "$(CALIB_DATA_DIR)" ] && [ -z "$(MLFLOW_TRACKING_URI)" ]; then \
	  rm -rf mlflow.db mlflow.lock mlruns mlartifacts && echo "deleted the local MLflow store (mlflow.db)"; \
	else \
	  echo "kept the MLflow store $(TRACKING_URI): it may track runs of other data folders (make prune removes the runs of pruned versions)"; \
	fi

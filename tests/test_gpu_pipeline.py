"""The GPU acceptance script (benchmarks/gpu_pipeline.py): its --smoke mode runs the same
path -- the real `kedro run` of focal_meta, sequential then DaskRunner, and every check --
tiny on CPU, so it cannot rot; and its checks fail when they should."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("gpu_pipeline", ROOT / "benchmarks/gpu_pipeline.py")
gpu_pipeline = importlib.util.module_from_spec(SPEC)
sys.modules["gpu_pipeline"] = gpu_pipeline  # its dataclass looks its module up there
SPEC.loader.exec_module(gpu_pipeline)


@pytest.mark.slow
def test_the_smoke_run_passes_every_check_and_prints_stage_times_and_rates(tmp_path):
    env = {**os.environ, "DO_NOT_TRACK": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_pipeline.py", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    assert out.rstrip().endswith("all checks hold")
    stages = {line.split()[0] for line in out.split("=== stage times")[1].splitlines()[2:8]}
    assert {"data_split", "training", "logits", "posthoc", "reporting"} <= stages
    assert re.search(r"dask: local cluster of \d+ CPU worker\(s\)", out), "from the run's log"
    rates = [line for line in out.splitlines() if ".train_seed_0" in line and " cpu " in line]
    assert len(rates) == 2 * 12, "every training of both runs, with its device and images/s"
    assert (tmp_path / "dask" / "mlflow.db").exists() and (tmp_path / "sequential").is_dir()


def test_params_split_at_top_level_commas_only():
    assert gpu_pipeline.split_params("seeds=[0,1],training.epochs=2,a.b={x: 1, y: 2}") == [
        "seeds=[0,1]",
        "training.epochs=2",
        "a.b={x: 1, y: 2}",
    ]


def test_tables_that_differ_are_a_failure_exactly_or_beyond_the_tolerance():
    table = pd.DataFrame({"method": ["ce", "focal"], "metric": ["ece", "ece"], "value": [0.1, 0.2]})
    nudged = table.assign(value=[0.1, 0.2 + 1e-9])
    assert gpu_pipeline.compare_tables(table, table.iloc[::-1], None) == [], "row order is free"
    runs = table.assign(run_id="2026-11-28T09.07.26.548Z"), table.assign(run_id="2026-11-28T10.0")
    assert gpu_pipeline.compare_tables(*runs, None) == [], "each run's own save version"
    assert gpu_pipeline.compare_tables(table, nudged, None), "exact: any difference fails"
    assert gpu_pipeline.compare_tables(table, nudged, 1e-6) == [], "within the tolerance"
    assert gpu_pipeline.compare_tables(table, table.iloc[:1], None) == [
        "the Dask table has other columns or rows than the sequential one"
    ]


def test_an_artifact_that_ran_elsewhere_or_says_nothing_is_a_failure():
    records = {
        "ce.seed_0.checkpoint": {"execution": {"device": "cuda:0"}},
        "ce.seed_0.logits": {"execution": {"device": "cpu"}},
        "ls.seed_1.checkpoint": {},
    }
    catalog = SimpleNamespace(load=records.__getitem__)
    nodes = {
        "ce.train_seed_0": {"training"},
        "ce.logits_seed_0": {"logits"},
        "ls.train_seed_1": {"training"},
        "study.evaluate": {"reporting"},
    }
    assert gpu_pipeline.execution_checks(catalog, nodes, "cuda") == [
        "ce.logits_seed_0: ran on cpu, expected cuda",
        "ls.train_seed_1: ran on not recorded, expected cuda",
    ]


def test_without_a_gpu_the_full_run_refuses_and_names_the_smoke_mode():
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_pipeline.py"],
        cwd=ROOT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2 and "run with --smoke" in done.stderr


def test_the_wheels_for_a_gpu_node_are_the_projects_requirements_less_its_torch():
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_wheels.py", "--print-requirements"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = [re.split(r"[\[<>=!~; ]", line, maxsplit=1)[0] for line in done.stdout.split()]
    assert {"kedro", "kedro-datasets", "mlflow", "dask", "dask-cuda", "omegaconf"} <= set(names)
    assert not {"torch", "torchvision", "kedro-viz"} & set(names), "the node keeps its CUDA torch"
    assert len(names) == len(set(names)), "each requirement once"

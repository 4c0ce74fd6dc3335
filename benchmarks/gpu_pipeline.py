"""GPU acceptance run of the product: the real ``kedro run`` of a study, not library calls.

It runs ``python -m calib_pipeline --env=ENV --pipelines=STUDY`` (the project's ``kedro run``)
twice, each in a fresh data folder with its own MLflow database: first on Kedro's sequential
runner, then on ``calib_pipeline.runner.DaskRunner`` (a local cluster: dask-cuda's
``LocalCUDACluster``, one worker per GPU, where CUDA is visible; CPU workers otherwise). Then
it checks, from the artifacts both runs saved:

- every training, logits and shift artifact records the device it ran on (the ``execution``
  record) and that device is the expected one (``cuda`` on a GPU machine);
- each run wrote the study's metrics and claims report, and MLflow holds one parent run with
  a nested run per training;
- the Dask run's metrics table equals the sequential run's: exactly, because both train with
  ``training.deterministic=true`` (deterministic cuDNN/cuBLAS kernels, autotuning off) on the
  same card -- or on the CPU with one thread per run. ``--nondeterministic`` drops that
  setting and then compares to ``--tolerance``.

It prints the wall time of each run and each stage's node seconds (split, training, logits,
shift, posthoc, reporting), and each training's images/s (its checkpoint's ``execution``).

    python benchmarks/gpu_pipeline.py                        # GPU: fashion_mnist focal_meta
    python benchmarks/gpu_pipeline.py --smoke                # the same path, tiny, on CPU
    python benchmarks/gpu_pipeline.py --params "seeds=[0],training.epochs=5"

Exit status 0 when every check holds, 1 otherwise (each failed check is printed). Carrying
what it needs to a GPU node without a package index: docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NODE_LINE = re.compile(r"^\[\s*\d+/\d+\] (?P<node>\S+)\s+(?P<seconds>[\d.]+) s")
DASK_CLUSTER = re.compile(r"Dask: local cluster of (?P<count>\d+) (?P<kind>GPU|CPU) worker")
STAGES = ("data_split", "training", "logits", "shift", "posthoc", "reporting", "replication")
# What the GPU run is sized to by default: one seed of every method, the env's own epochs.
GPU_PARAMS = "seeds=[0]"
# The smoke run: one epoch, and one bin count of the reliability report (its figures are
# most of a tiny run's time).
SMOKE_PARAMS = "training.epochs=1,studies.focal_meta.reports.reliability.n_bins=[15]"
RUNNERS = {
    "sequential": (),
    "dask": ("--runner=calib_pipeline.runner.DaskRunner",),
}


@dataclass
class Run:
    """One ``kedro run``: its folder, console output and times."""

    name: str
    data_dir: Path
    returncode: int = -1
    wall_seconds: float = 0.0
    lines: list[str] = field(default_factory=list)

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.data_dir / 'mlflow.db'}"

    def node_seconds(self) -> dict[str, float]:
        """Node name -> the seconds the console reported for it."""
        found = (NODE_LINE.match(line) for line in self.lines)
        return {m["node"]: float(m["seconds"]) for m in found if m}


def split_params(text: str) -> list[str]:
    """``a=1,b=[0,1]`` -> ``["a=1", "b=[0,1]"]``: commas inside brackets stay."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    return [item for item in [*items, current] if item.strip()]


def kedro_run(
    run: Run, env: str, study: str, params: str, runner: tuple[str, ...], timeout: float
) -> Run:
    """Run ``kedro run`` as a user types it, streaming its console to ours; stopped (its
    whole process group) after ``timeout`` seconds."""
    environment = {
        **os.environ,
        "CALIB_DATA_DIR": str(run.data_dir),
        "MLFLOW_TRACKING_URI": run.tracking_uri,
        "DO_NOT_TRACK": "1",
        "KEDRO_DISABLE_TELEMETRY": "true",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    command = [sys.executable, "-m", "calib_pipeline", f"--env={env}"]  # kedro run
    command += [f"--pipelines={study}", f"--params={params}", *runner]
    print(f"\n=== {run.name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    with subprocess.Popen(
        command,
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout stops its workers too
    ) as process:
        stopper = threading.Timer(timeout, os.killpg, args=(process.pid, signal.SIGTERM))
        stopper.start()
        for line in process.stdout:
            run.lines.append(line.rstrip("\n"))
            print(f"  {line}", end="", flush=True)
        stopper.cancel()
    run.returncode = process.returncode
    run.wall_seconds = time.perf_counter() - started
    if run.wall_seconds >= timeout:
        run.lines.append(f"stopped after {timeout:.0f} s (--run-timeout)")
    return run


def session_view(run: Run, env: str, params: str) -> tuple[Any, Any]:
    """The run's pipeline and catalog, through a Kedro session over its data folder."""
    from kedro.framework.project import pipelines
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project
    from omegaconf import OmegaConf

    os.environ["CALIB_DATA_DIR"] = str(run.data_dir)
    bootstrap_project(ROOT)
    runtime = OmegaConf.to_container(OmegaConf.from_dotlist(split_params(params)))
    session = KedroSession.create(project_path=ROOT, env=env, runtime_params=runtime)
    context = session.load_context()
    return pipelines, context.catalog


def cluster_started(run: Run) -> tuple[str, str] | None:
    """(workers, GPU or CPU) of the local Dask cluster the run's log file records starting
    (the runner logs it to the file, not the console); None when none started."""
    for log in sorted((run.data_dir / "logs").glob("*.log")):
        found = DASK_CLUSTER.search(log.read_text(errors="replace"))
        if found:
            return found["count"], found["kind"]
    return None


def stage_of(tags: set[str]) -> str:
    return next((stage for stage in STAGES if stage in tags), "other")


def stage_table(run: Run, nodes: dict[str, set[str]]) -> dict[str, tuple[int, float]]:
    """Stage -> (nodes, their console seconds summed)."""
    table: dict[str, list[float]] = defaultdict(list)
    for name, seconds in run.node_seconds().items():
        table[stage_of(nodes.get(name, set()))].append(seconds)
    return {stage: (len(times), sum(times)) for stage, times in table.items()}


def execution_checks(catalog: Any, nodes: dict[str, set[str]], device: str) -> list[str]:
    """Every training, logits and shift artifact ran on ``device``; returns the failures."""
    failures = []
    for name in sorted(nodes):
        stage = stage_of(nodes[name])
        if stage not in ("training", "logits", "shift"):
            continue
        method, seed = name.split(".")[0], name.rsplit("_", 1)[-1]
        kind = {"training": "checkpoint", "logits": "logits", "shift": "shift_logits"}[stage]
        artifact = catalog.load(f"{method}.seed_{seed}.{kind}")
        ran_on = artifact.get("execution", {}).get("device", "not recorded")
        if not ran_on.startswith(device):
            failures.append(f"{name}: ran on {ran_on}, expected {device}")
    return failures


def training_rates(catalog: Any, nodes: dict[str, set[str]]) -> dict[str, dict[str, Any]]:
    """Training node -> its checkpoint's execution record (device, name, images/s)."""
    rates = {}
    for name in sorted(n for n, tags in nodes.items() if stage_of(tags) == "training"):
        method, seed = name.split(".")[0], name.rsplit("_", 1)[-1]
        rates[name] = catalog.load(f"{method}.seed_{seed}.checkpoint")["execution"]
    return rates


def mlflow_checks(run: Run, trainings: int) -> list[str]:
    """One parent run with a nested run per training, each with metrics."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=run.tracking_uri)
    experiment = client.get_experiment_by_name("calib-pipeline")
    if experiment is None:
        return [f"{run.name}: no MLflow experiment at {run.tracking_uri}"]
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    failures = []
    if len(parents) != 1:
        failures.append(f"{run.name}: {len(parents)} MLflow parent runs, expected 1")
    if len(children) != trainings:
        failures.append(f"{run.name}: {len(children)} nested runs, expected {trainings}")
    failures += [
        f"{run.name}: nested run {c.data.tags.get('method')} seed {c.data.tags.get('seed')} "
        "has no metrics"
        for c in children
        if not c.data.metrics
    ]
    return failures


def compare_tables(sequential: Any, dask: Any, tolerance: float | None) -> list[str]:
    """The two runs' metrics tables: equal exactly (``tolerance`` None) or to ``tolerance``;
    the ``run_id`` column (each run's save version) differs by design."""
    import pandas as pd

    sequential, dask = (t.drop(columns=["run_id"], errors="ignore") for t in (sequential, dask))

    keys = [c for c in sequential.columns if not pd.api.types.is_numeric_dtype(sequential[c])]
    if list(sequential.columns) != list(dask.columns) or len(sequential) != len(dask):
        return ["the Dask table has other columns or rows than the sequential one"]
    a = sequential.sort_values(keys).reset_index(drop=True)
    b = dask.sort_values(keys).reset_index(drop=True)
    try:
        if tolerance is None:
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        else:
            pd.testing.assert_frame_equal(a, b, check_exact=False, atol=tolerance, rtol=0)
    except AssertionError as difference:
        first = str(difference).splitlines()[:6]
        return ["the Dask table differs from the sequential one: " + " | ".join(first)]
    return []


def inspect_run(run: Run, env: str, study: str, params: str, device: str) -> dict[str, Any]:
    """Load what the run saved: its node tags, metrics table, training rates; check devices,
    reports and MLflow."""
    pipelines, catalog = session_view(run, env, params)
    nodes = {node.name: set(node.tags) for node in pipelines[study].nodes}
    stopped = [line for line in run.lines[-1:] if line.startswith("stopped after")]
    failures = [] if run.returncode == 0 else [f"{run.name}: kedro run exited {run.returncode}"]
    failures += [f"{run.name}: {line}" for line in stopped]
    if failures:
        return {"failures": failures, "nodes": nodes}
    failures += execution_checks(catalog, nodes, device)
    for report in ("metrics", "report_claims"):
        if not catalog.exists(f"{study}.{report}"):
            failures.append(f"{run.name}: no {study}.{report} saved")
    trainings = sum(stage_of(tags) == "training" for tags in nodes.values())
    failures += mlflow_checks(run, trainings)
    return {
        "failures": failures,
        "nodes": nodes,
        "metrics": catalog.load(f"{study}.metrics"),
        "rates": training_rates(catalog, nodes),
    }


def print_report(runs: dict[str, Run], seen: dict[str, dict[str, Any]]) -> None:
    """Wall times, stage node seconds and each training's images/s, per runner."""
    print("\n=== stage times (node seconds as the console reported them; Dask overlaps tasks)")
    tables = {name: stage_table(runs[name], seen[name]["nodes"]) for name in runs}
    print(f"{'stage':<12}" + "".join(f"{name:>26}" for name in runs))
    for stage in [*STAGES, "other"]:
        if any(stage in table for table in tables.values()):
            cells = (tables[name].get(stage, (0, 0.0)) for name in runs)
            print(f"{stage:<12}" + "".join(f"{n:>10} nodes {s:>8.1f} s" for n, s in cells))
    print(f"{'wall':<12}" + "".join(f"{runs[name].wall_seconds:>24.1f} s" for name in runs))
    for name in runs:
        cluster = cluster_started(runs[name])
        if cluster:
            print(f"{name}: local cluster of {cluster[0]} {cluster[1]} worker(s)")
    print("\n=== training images/s (train images per second of epoch wall time)")
    for name in runs:
        for node, record in seen[name].get("rates", {}).items():
            rate = record.get("images_per_second")
            shown = "reused" if rate is None else f"{rate:,.0f}"
            print(f"{name:<11} {node:<40} {record['device']:<8} {record['name']:<24} {shown:>10}")


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run of the same path")
    parser.add_argument("--env", help="default: fashion_mnist (GPU), test (--smoke)")
    parser.add_argument("--study", default="focal_meta")
    parser.add_argument("--params", help=f"kedro --params (default {GPU_PARAMS!r} on a GPU)")
    parser.add_argument("--workers", type=int, help="DaskRunner's local workers (default: Dask's)")
    parser.add_argument("--out", type=Path, help="folder of the two runs (default: a temp one)")
    parser.add_argument("--nondeterministic", action="store_true", help="cuDNN's fastest kernels")
    parser.add_argument("--tolerance", type=float, default=1e-6, help="with --nondeterministic")
    parser.add_argument("--run-timeout", type=float, default=1800, help="seconds per kedro run")
    return parser.parse_args()


def main() -> int:
    import torch

    args = parse_arguments()
    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device here: run with --smoke for the CPU path", file=sys.stderr)
        return 2
    device = "cpu" if args.smoke else "cuda"
    env = args.env or ("test" if args.smoke else "fashion_mnist")
    params = args.params or (SMOKE_PARAMS if args.smoke else GPU_PARAMS)
    pinned = "training.num_threads=1" if args.smoke else f"training.device={device}"
    params = ",".join(
        [params, pinned, f"training.deterministic={str(not args.nondeterministic).lower()}"]
    )
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu_pipeline_"))
    dask = RUNNERS["dask"] + ((f"--runner-params=workers={args.workers}",) if args.workers else ())
    runners = {"sequential": RUNNERS["sequential"], "dask": dask}
    runs = {
        name: kedro_run(Run(name, out / name), env, args.study, params, runner, args.run_timeout)
        for name, runner in runners.items()
    }
    seen = {name: inspect_run(run, env, args.study, params, device) for name, run in runs.items()}
    failures = [failure for name in runs for failure in seen[name]["failures"]]
    cluster = cluster_started(runs["dask"])
    if runs["dask"].returncode == 0 and (cluster or ("", ""))[1] != device.upper():
        failures.append(f"dask: no local {device.upper()} cluster in its log (found {cluster})")
    if not failures:
        tolerance = args.tolerance if args.nondeterministic else None
        failures += compare_tables(
            seen["sequential"]["metrics"], seen["dask"]["metrics"], tolerance
        )
    print_report(runs, seen)
    print(f"\nruns in {out}; device {device}; {env} {args.study}; --params={params}")
    for failure in failures:
        print(f"FAILED: {failure}")
    print("all checks hold" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

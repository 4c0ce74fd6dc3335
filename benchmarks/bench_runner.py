"""Wall time of a test-sized study on the Dask runner against the sequential runner.

Anchor: ``kedro run --env=test --pipelines=<study>`` on Kedro's SequentialRunner. Measured:
the same command with ``--runner=calib_pipeline.runner.DaskRunner`` on a local cluster of
``--workers`` worker processes (CPU here; one per GPU where dask-cuda sees GPUs). The runs
alternate, each in a fresh data folder and MLflow database (nothing is reused from an
earlier run), and the table prints medians of ``--repeats``: the whole command and the
pipeline alone (Kedro's "completed successfully in" line). The cluster's start-up cost is
measured on its own: start the workers, run a first task (the worker imports torch and the
project, as a first training does), shut down.

With GPUs it also trains ResNet-18 on CIFAR-shaped synthetic data (batch 128, crop + flip,
val and test evaluated every epoch, as the cifar10 protocol): one task on one GPU, then one
task per GPU at once, and prints the aggregate training images/s.

    python benchmarks/bench_runner.py                          # focal_meta on conf/test, 2 workers
    python benchmarks/bench_runner.py --pipeline baseline --repeats 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import distributed

from calib_pipeline.runner import local_cluster, visible_gpu_count

PROJECT = Path(__file__).resolve().parents[1]
KEDRO = str(Path(sys.executable).parent / "kedro")
COMPLETED = re.compile(r"completed successfully in ([\d.]+) sec")  # Kedro's last line


def kedro_run(pipeline: str, runner_args: list[str], folder: Path) -> tuple[float, float]:
    """Wall seconds of the whole command and of the pipeline alone, in a fresh data folder."""
    env = {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "KEDRO_DISABLE_TELEMETRY": "true",
        "PYTHONWARNINGS": "ignore",
        "COLUMNS": "400",  # one log record per line
        "CALIB_DATA_DIR": str(folder / "data"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{folder}/mlflow.db",
    }
    started = time.perf_counter()
    result = subprocess.run(
        [KEDRO, "run", "--env=test", f"--pipelines={pipeline}", *runner_args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    output = " ".join((result.stdout + result.stderr).split())
    if result.returncode != 0:
        raise RuntimeError(f"kedro run {runner_args} failed:\n{output[-3000:]}")
    return wall, float(COMPLETED.search(output).group(1))


def import_a_training_task() -> None:
    """What a worker's first training task imports."""
    import calib_pipeline.pipelines.training.nodes  # noqa: F401


def cluster_startup(workers: int) -> tuple[float, float, float]:
    """Seconds to start ``workers`` workers, to run a first task on each, to shut down."""
    started = time.perf_counter()
    with local_cluster(workers, workers) as cluster, distributed.Client(cluster) as client:
        up = time.perf_counter()
        client.run(import_a_training_task)
        warm = time.perf_counter()
    return up - started, warm - up, time.perf_counter() - warm


def compare_runners(pipeline: str, workers: int, repeats: int) -> None:
    runs = {"sequential": [], "dask": []}
    dask_args = ["--runner=calib_pipeline.runner.DaskRunner", f"--runner-params=workers={workers}"]
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(repeats):  # interleaved, so machine noise hits both alike
            for name, args in (("sequential", []), ("dask", dask_args)):
                runs[name].append(kedro_run(pipeline, args, Path(scratch) / f"{name}-{repeat}"))
    startup = [cluster_startup(workers) for _ in range(repeats)]
    print(
        f"kedro run --env=test --pipelines={pipeline}: median of {repeats}, {os.cpu_count()} CPU(s)"
    )
    print(f"{'runner':34s} {'command s':>10s} {'pipeline s':>11s}")
    for name, label in (
        ("sequential", "SequentialRunner"),
        ("dask", f"DaskRunner, {workers} local workers"),
    ):
        wall, pipeline_seconds = (statistics.median(column) for column in zip(*runs[name]))
        print(f"{label:34s} {wall:10.1f} {pipeline_seconds:11.1f}")
    sequential = statistics.median(p for _, p in runs["sequential"])
    print(
        "pipeline speed-up of the Dask runner: "
        f"{sequential / statistics.median(p for _, p in runs['dask']):.2f}x"
    )
    up, warm, down = (statistics.median(column) for column in zip(*startup))
    print(
        f"cluster start-up cost: {up:.1f} s to start {workers} workers + {warm:.1f} s for their "
        f"first task's imports + {down:.1f} s to shut down = {up + warm + down:.1f} s"
    )


def train_synthetic_cifar(images: int, epochs: int) -> tuple[float, int]:
    """One ResNet-18 training on this worker's GPU: (seconds, training images seen)."""
    import torch

    from calib_pipeline.calibration.losses import build_objective
    from calib_pipeline.calibration.methods import ObjectiveLearner
    from calib_pipeline.models import build_model
    from calib_pipeline.training import Split, TrainConfig, train_model

    generator = torch.Generator().manual_seed(0)
    data = torch.rand(images + 2 * 5000, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (len(data),), generator=generator)
    train, val, test = (
        Split(data[a:b], labels[a:b])
        for a, b in ((0, images), (images, images + 5000), (images + 5000, len(data)))
    )
    config = TrainConfig(epochs=epochs, batch_size=128, lr=0.1, augment="crop_flip", device="cuda")
    model = build_model("resnet18", in_channels=3, num_classes=10, image_size=32)
    torch.cuda.synchronize()
    started = time.perf_counter()
    train_model(
        model,
        ObjectiveLearner(build_objective("cross_entropy")),
        train,
        val,
        config,
        normalization=((0.5,) * 3, (0.25,) * 3),
        seed=0,
        test=test,
    )
    torch.cuda.synchronize()
    return time.perf_counter() - started, images * epochs


def gpu_throughput(gpus: int, images: int, epochs: int) -> None:
    with local_cluster(None, gpus) as cluster, distributed.Client(cluster) as client:
        one = client.submit(
            train_synthetic_cifar, images, epochs, resources={"GPU": 1}, pure=False
        ).result()
        started = time.perf_counter()
        futures = [
            client.submit(train_synthetic_cifar, images, epochs, resources={"GPU": 1}, pure=False)
            for _ in range(gpus)
        ]
        seen = sum(count for _, count in client.gather(futures))
        wall = time.perf_counter() - started
    single = one[1] / one[0]
    print(
        f"ResNet-18, CIFAR-shaped, {images} images x {epochs} epochs per task "
        "(val + test each epoch)"
    )
    print(
        f"one GPU alone: {single:,.0f} images/s; {gpus} GPUs, one task each: {seen / wall:,.0f} "
        f"images/s in aggregate ({seen / wall / single / gpus:.0%} of {gpus} x one GPU)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="focal_meta")
    parser.add_argument("--workers", type=int, help="local workers; default one per GPU, else 2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--gpu-images", type=int, default=40_000, help="training images per GPU task"
    )
    parser.add_argument("--gpu-epochs", type=int, default=3)
    args = parser.parse_args()
    gpus = visible_gpu_count()
    compare_runners(args.pipeline, args.workers or gpus or 2, args.repeats)
    if gpus:
        gpu_throughput(gpus, args.gpu_images, args.gpu_epochs)


if __name__ == "__main__":  # Dask's worker processes re-import this module
    main()

"""Prediction from a checkpoint (the logits and shift stages): images per second at the
run's ``eval_batch_size`` -- what the predictor uses unless ``logits.batch_size`` is set --
against batches of 1,024 (the anchor: what every run was predicted at before), in the same
run, alternating round by round, with a check that both give the same logits.

The shift stage predicts every run on every shifted set (85 sets of 10,000 images on
Fashion-MNIST): on a CPU that is most of a study's time after training. The model is the
env's, untrained (speed does not depend on the weights); the images are random uint8 of the
dataset's shape. Measured figures: benchmarks/README.md, docs/performance.md.

    PYTHONPATH=src python benchmarks/bench_predict.py --env fashion_mnist
    PYTHONPATH=src python benchmarks/bench_predict.py --env base --batches 64 128 256
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from calib_pipeline.models import build_model
from calib_pipeline.settings import load_parameters
from calib_pipeline.training.predict import checkpoint_predictor

ANCHOR = 1024
SHAPES = {"digits": (1, 8), "fashion_mnist": (1, 28), "cifar10": (3, 32), "cifar100": (3, 32)}


def checkpoint_of(env: str) -> tuple[dict, tuple[int, int]]:
    """An untrained checkpoint of ``env``'s model and eval batch size, and the image shape."""
    parameters = load_parameters(None if env == "base" else env)
    dataset = parameters["dataset"]["name"]
    channels, size = SHAPES[dataset]
    model = parameters["model"]
    architecture = {
        "name": model["name"],
        "params": model.get("params") or {},
        "in_channels": channels,
        "num_classes": 100 if dataset == "cifar100" else 10,
        "image_size": size,
    }
    network = build_model(
        architecture["name"],
        in_channels=channels,
        num_classes=architecture["num_classes"],
        image_size=size,
        **architecture["params"],
    )
    training = {"eval_batch_size": parameters["training"].get("eval_batch_size", ANCHOR)}
    checkpoint = {
        "state_dict": network.state_dict(),
        "architecture": architecture,
        "normalization": {"mean": [0.5] * channels, "std": [0.25] * channels},
        "config": {"training": training},
    }
    return checkpoint, (channels, size)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="fashion_mnist", help="a conf env, or base (digits)")
    parser.add_argument("--images", type=positive, default=10_000)
    parser.add_argument("--rounds", type=positive, default=3)
    parser.add_argument("--threads", type=positive, default=1, help="torch threads (CPU runs: 1)")
    parser.add_argument(
        "--batches", type=positive, nargs="*", default=[], help="more batch sizes to time"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checkpoint, (channels, size) = checkpoint_of(args.env)
    run_batch = checkpoint["config"]["training"]["eval_batch_size"]
    images = torch.randint(0, 256, (args.images, channels, size, size), dtype=torch.uint8)
    sizes = list(dict.fromkeys([ANCHOR, run_batch, *args.batches]))
    predictors = {b: checkpoint_predictor(checkpoint, "cpu", batch_size=b) for b in sizes}
    reference = predictors[ANCHOR](images)[0]
    for batch, predict in predictors.items():
        difference = (predict(images)[0] - reference).abs().max().item()
        print(f"batch {batch}: largest |logit difference| from batch {ANCHOR}: {difference:.2e}")
    seconds: dict[int, list[float]] = {b: [] for b in sizes}
    for _ in range(args.rounds):
        for batch, predict in predictors.items():
            start = time.perf_counter()
            predict(images)
            seconds[batch].append(time.perf_counter() - start)
    anchor = statistics.median(seconds[ANCHOR])
    print(
        f"{args.env}: {checkpoint['architecture']['name']} {checkpoint['architecture']['params']}, "
        f"{args.images} images, {args.threads} thread(s), median of {args.rounds} rounds"
    )
    for batch in sizes:
        median = statistics.median(seconds[batch])
        role = (
            " (anchor)"
            if batch == ANCHOR
            else " (the run's eval_batch_size)" * (batch == run_batch)
        )
        print(
            f"  batch {batch:>5}{role}: {args.images / median:,.0f} images/s, "
            f"{anchor / median:.2f}x the anchor"
        )


if __name__ == "__main__":
    main()

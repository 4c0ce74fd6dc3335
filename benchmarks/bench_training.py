"""Training-engine throughput relative to the seed papers' style of loop.

Anchor: the loop of the papers' public code -- a ``torch.utils.data.DataLoader`` over a
``TensorDataset`` with per-sample indexing and collation, normalisation per batch, and a
``loss.item()`` / accuracy ``.item()`` host sync every step. Measured: one epoch of
``calib_pipeline.training.train_model`` (device-resident data, batched normalisation and
augmentation, one host sync per epoch) on the same model, data, batch size and objective,
its per-epoch evaluation of val and test included. Both sides run with the same thread
count; the table prints the median of ``--repeats`` epochs and the ratio anchor / engine.

    python benchmarks/bench_training.py                 # CPU, 1 thread
    python benchmarks/bench_training.py --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from calib_pipeline.calibration.losses import build_objective
from calib_pipeline.calibration.methods import ObjectiveLearner
from calib_pipeline.models import build_model
from calib_pipeline.training import Split, TrainConfig, train_model

CONFIGS = [  # label, architecture, channels, image size, training images
    ("small_cnn 8x8 (digits size)", "small_cnn", 1, 8, 1280),
    ("small_cnn 28x28", "small_cnn", 1, 28, 2560),
]


def paper_style_epoch(model, images, labels, objective, batch_size, device) -> float:
    loader = DataLoader(TensorDataset(images, labels), batch_size=batch_size, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    model.train()
    started = time.perf_counter()
    total, correct = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        x = (x - 0.5) / 0.25
        logits = model(x)
        loss = objective(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
        correct += (logits.argmax(1) == y).sum().item()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def engine_epoch(model, images, labels, objective, batch_size, device) -> float:
    config = TrainConfig(
        epochs=1, batch_size=batch_size, lr=0.01, device=device.type, track_test=False
    )
    val = Split(images[:256], labels[:256])
    started = time.perf_counter()
    learner = ObjectiveLearner(objective)
    train_model(
        model, learner, Split(images, labels), val, config, normalization=((0.5,), (0.25,)), seed=0
    )
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    objective = build_objective("cross_entropy")
    print(
        f"device={device}, threads={args.threads}, batch={args.batch_size}, median of "
        f"{args.repeats} epochs"
    )
    print(f"{'config':32s} {'paper-style s':>14s} {'engine s':>10s} {'speed-up':>9s}")
    for label, arch, channels, size, n in CONFIGS:
        generator = torch.Generator().manual_seed(0)
        images = torch.rand(n, channels, size, size, generator=generator)
        labels = torch.randint(0, 10, (n,), generator=generator)
        model = build_model(arch, in_channels=channels, num_classes=10, image_size=size).to(device)
        paper_style_epoch(model, images, labels, objective, args.batch_size, device)  # warm-up
        engine_epoch(model, images, labels, objective, args.batch_size, device)
        paper, engine = [], []
        for _ in range(args.repeats):  # interleaved so machine noise hits both alike
            paper.append(
                paper_style_epoch(model, images, labels, objective, args.batch_size, device)
            )
            engine.append(engine_epoch(model, images, labels, objective, args.batch_size, device))
        p, e = statistics.median(paper), statistics.median(engine)
        print(f"{label:32s} {p:14.3f} {e:10.3f} {p / e:8.2f}x")


if __name__ == "__main__":
    main()

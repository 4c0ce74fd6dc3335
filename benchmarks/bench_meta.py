"""Cost of one meta-learning iteration relative to a plain cross-entropy step.

For each configuration (architecture, image size, batch size) the anchor is one CE training
step (forward, cross-entropy, backward, SGD step with lr 0) on a batch; the measured cases are one
``MetaLearner.step`` on the same model with a train batch and a meta-val batch of the same
size (backbone step + γ-Net / regulariser step). Each repeat times ``--inner`` consecutive
steps of every case, interleaved so drift hits all cases alike; the table reports medians
over ``--repeats`` repeats and the ratio to the CE median. Issue 5's target for the default
learner (fl_gamma_sece, last-layer unroll) is a ratio <= 2.3.

    python benchmarks/bench_meta.py                      # CPU, 1 thread
    python benchmarks/bench_meta.py --device cuda        # GPU (batch 128 everywhere)
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _timing import seconds_per_call

from calib_pipeline.calibration.meta import build_meta_learner
from calib_pipeline.models import build_model

# (label, architecture, channels, image size, CPU batch, CUDA batch)
CONFIGS = [
    ("small_cnn 8x8", "small_cnn", 1, 8, 128, 128),
    ("small_cnn 28x28", "small_cnn", 1, 28, 128, 128),
    ("resnet18 32x32", "resnet18", 3, 32, 32, 128),
]
# (label, learner name, hyperparameters)
CASES = [
    ("fl_gamma_sece last_layer", "fl_gamma_sece", {"unroll": "last_layer"}),
    ("ce_dece last_layer", "ce_dece", {"unroll": "last_layer"}),
    ("fl_gamma_sece full", "fl_gamma_sece", {"unroll": "full"}),
]
NUM_CLASSES = 10
TARGET_RATIO = 2.3


def bench_config(
    arch: str, channels: int, size: int, batch: int, device: torch.device, args: argparse.Namespace
) -> dict[str, float]:
    """Median seconds per step of the CE anchor and of every meta-learning case."""
    torch.manual_seed(0)
    model = build_model(arch, in_channels=channels, num_classes=NUM_CLASSES, image_size=size)
    model = model.to(device).train()
    # lr = 0: the same arithmetic as a real step, but hundreds of steps on one random batch
    # cannot saturate or diverge the model (and every case times the same model state).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9, weight_decay=5e-4)
    x, xv = (torch.randn(batch, channels, size, size, device=device) for _ in range(2))
    y, yv = (torch.randint(0, NUM_CLASSES, (batch,), device=device) for _ in range(2))

    def ce_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    steps: dict[str, Callable[[], object]] = {"ce step (anchor)": ce_step}
    for label, name, hp in CASES:
        learner = build_meta_learner(
            name, num_classes=NUM_CLASSES, feature_dim=model.feature_dim, **hp
        ).to(device)
        steps[label] = lambda learner=learner: learner.step(model, optimizer, x, y, xv, yv)

    for step in steps.values():  # warm-up: allocator, cuDNN autotuning, lazy inits
        seconds_per_call(step, args.warmup, device)
    samples: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(args.repeats):
        for label, step in steps.items():
            samples[label].append(seconds_per_call(step, args.inner, device))
    return {label: statistics.median(values) for label, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (both sides)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--inner", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--configs", nargs="*", default=[c[0] for c in CONFIGS],
                        help="subset of: " + ", ".join(c[0] for c in CONFIGS))  # fmt: skip
    args = parser.parse_args()
    if args.repeats < 5:
        parser.error("--repeats must be >= 5 (medians of at least five runs)")
    name = args.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    torch.set_num_threads(args.threads)
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU, {args.threads} thread(s)"
    )
    print(f"bench_meta on {where}; torch {torch.__version__}; median of {args.repeats} repeats "
          f"x {args.inner} steps; train and meta-val batches of equal size")  # fmt: skip

    for label, arch, channels, size, cpu_batch, cuda_batch in CONFIGS:
        if label not in args.configs:
            continue
        batch = cuda_batch if device.type == "cuda" else cpu_batch
        medians = bench_config(arch, channels, size, batch, device, args)
        anchor = medians["ce step (anchor)"]
        print(f"\n{label}, batch {batch}")
        for case, seconds in medians.items():
            ratio = seconds / anchor
            flag = ""
            if case == CASES[0][0]:
                verdict = "ok" if ratio <= TARGET_RATIO else "MISSED"
                flag = f"  (target <= {TARGET_RATIO:.1f}x: {verdict})"
            print(f"  {case:<26} {seconds * 1e3:9.2f} ms  {ratio:5.2f}x{flag}")


if __name__ == "__main__":
    main()

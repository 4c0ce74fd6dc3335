"""Several seeds of one method in one process: ``torch.func.vmap`` over stacked models
against training the seeds one after another (issue 13, item 4: measure before keeping it).

M copies of the digits protocol's model (``small_cnn_dense``, 8 x 8 x 1 images, batch 128,
cross-entropy, SGD with momentum 0.9), each with its own initialisation and its own batch
order, train one epoch of random data twice: one model after another, and all M at once as
one vmapped step over ``torch.func.stack_module_state`` (BatchNorm's running statistics
are stacked buffers, updated per seed). The script checks that both give the same weights
and running statistics (float tolerance, after the first 2 steps in true fp32: rounding
differences grow over many SGD steps, see ``_difference``) before it prints the times, so
the comparison is of equal work. The engine does not train seeds this way: see docs/performance.md
for the measurement that decided it.

    PYTHONPATH=src python benchmarks/bench_vmap_seeds.py
    PYTHONPATH=src python benchmarks/bench_vmap_seeds.py --seeds 2 5 --device cuda
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
import torch.nn.functional as F
from _timing import seconds_per_call
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from calib_pipeline.models import build_model

BATCH, LR, MOMENTUM = 128, 0.05, 0.9
CHECKED = 2 * BATCH  # images of the equality check: 2 steps


def _models(seeds: int, device: torch.device) -> list[nn.Module]:
    models = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        models.append(
            build_model("small_cnn_dense", in_channels=1, num_classes=10, image_size=8).to(device)
        )
    return models


def _orders(seeds: int, n: int, device: torch.device) -> list[torch.Tensor]:
    return [
        torch.randperm(n, generator=torch.Generator().manual_seed(100 + s)).to(device)
        for s in range(seeds)
    ]


def one_by_one(
    models: list[nn.Module], images: torch.Tensor, labels: torch.Tensor, orders: list[torch.Tensor]
) -> None:
    """One epoch of each model in turn (torch's SGD)."""
    for model, order in zip(models, orders):
        optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        for start in range(0, len(order), BATCH):
            index = order[start : start + BATCH]
            loss = F.cross_entropy(model(images[index]), labels[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


def all_at_once(
    models: list[nn.Module], images: torch.Tensor, labels: torch.Tensor, orders: list[torch.Tensor]
) -> tuple[dict, dict]:
    """One epoch of all models as one vmapped step per batch; the stacked weights and buffers.

    SGD with momentum as torch's (the first step's buffer is the gradient itself, which
    0.9 * 0 + g gives), applied to the stacked tensors with foreach ops.
    """
    params, buffers = stack_module_state(models)
    template = copy.deepcopy(models[0]).to("meta")

    def loss(p: dict, b: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(template, (p, b), (x,)), y)

    step = vmap(grad_and_value(loss))
    names = list(params)
    weights = [params[k] for k in names]
    momentum = [torch.zeros_like(w) for w in weights]
    for start in range(0, len(orders[0]), BATCH):
        index = torch.stack([order[start : start + BATCH] for order in orders])
        grads, _ = step(params, buffers, images[index], labels[index])
        with torch.no_grad():
            torch._foreach_mul_(momentum, MOMENTUM)
            torch._foreach_add_(momentum, [grads[k] for k in names])
            torch._foreach_add_(weights, momentum, alpha=-LR)
    return params, buffers


def _largest_difference(models: list[nn.Module], params: dict, buffers: dict) -> float:
    """Largest |one-by-one - vmapped| over every weight and float buffer of every seed."""
    worst = 0.0
    for seed, model in enumerate(models):
        for name, value in [*model.named_parameters(), *model.named_buffers()]:
            stacked = params.get(name, buffers.get(name))
            if value.is_floating_point():
                worst = max(worst, (value.detach() - stacked[seed]).abs().max().item())
    return worst


def _difference(
    seeds: int, images: torch.Tensor, labels: torch.Tensor, device: torch.device
) -> float:
    """Largest weight difference after one short epoch trained both ways, in true fp32.

    On CUDA, TF32 is off while it checks: with it, convolutions round to 10-bit mantissas,
    and a vmapped (grouped) convolution rounds differently from a plain one, so the two
    ways drift apart by 1e-1 over 100 steps (seen on an H200); in fp32 the rounding differs
    by ~1e-7 per step, which SGD amplifies too (5e-4 after 100 steps on the CPU), hence the
    short epoch of :data:`CHECKED` images. The timing runs with torch's defaults."""
    cudnn, matmul = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        orders = _orders(seeds, len(labels), device)
        reference = _models(seeds, device)
        one_by_one(reference, images, labels, orders)
        params, buffers = all_at_once(_models(seeds, device), images, labels, orders)
        return _largest_difference(reference, params, buffers)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = cudnn, matmul


def measure(seeds: int, n: int, device: torch.device, repeats: int) -> tuple[float, float, float]:
    """Median seconds of one epoch one by one and all at once, and their largest weight
    difference after the first :data:`CHECKED` images (``_difference``)."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(n, 1, 8, 8, generator=generator).to(device)
    labels = torch.randint(0, 10, (n,), generator=generator).to(device)
    orders = _orders(seeds, n, device)
    difference = _difference(seeds, images[:CHECKED], labels[:CHECKED], device)
    times: dict[str, list[float]] = {"one by one": [], "vmap": []}
    for _ in range(repeats):  # alternating, fresh models each time
        for label, loop in (("one by one", one_by_one), ("vmap", all_at_once)):
            models = _models(seeds, device)
            times[label].append(
                seconds_per_call(
                    lambda loop=loop, models=models: loop(models, images, labels, orders),
                    1,
                    device,
                )
            )
    return statistics.median(times["one by one"]), statistics.median(times["vmap"]), difference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[2, 5])
    parser.add_argument("--images", type=int, default=1_280, help="train images per epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if min(args.seeds) < 1 or args.images < BATCH or args.repeats < 1:
        parser.error("--seeds >= 1, --images >= 128 and --repeats >= 1")
    try:
        device = torch.device(args.device)
    except RuntimeError as error:
        parser.error(f"--device: {error}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    print(
        f"device: {where}; torch {torch.__version__}; small_cnn_dense, 8x8, batch {BATCH}, "
        f"{args.images} images per epoch, median of {args.repeats}",
        flush=True,
    )
    print(
        f"{'seeds':>5s} {'one by one s':>13s} {'vmap s':>8s} {'vmap speed-up':>14s} "
        f"{'max |diff|':>11s}"
    )
    for seeds in args.seeds:
        alone, together, difference = measure(seeds, args.images, device, args.repeats)
        if difference > 1e-4:
            raise SystemExit(
                f"{seeds} seeds: vmapped training differs from one by one by "
                f"{difference:.2e}; the times would compare different work"
            )
        print(
            f"{seeds:5d} {alone:13.4f} {together:8.4f} {alone / together:13.2f}x "
            f"{difference:11.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Throughput of the generated corruptions on 32x32 colour images.

Generates every corruption at all 5 severities for N synthetic 32x32 colour images and
reports images per second per corruption (5 * N / seconds for the five severities), the
slowest corruption, and each time as a ratio to an anchor measured in the same run: a
torchvision Gaussian blur (sigma 1) of the same batch.  Target: no corruption below
100 images/s on a 2-core CPU.

Two measurements, because the machine may be shared:
  * the median of ``--repeats`` runs on a small batch (``--small-n``, default 1,000), whose
    rate is extrapolated to N images (the work is linear in N);
  * one run on the full batch (``--n``, default 10,000), the actual workload.
Frost uses synthetic textures written to a temporary folder (the real photographs cannot
be shipped); its cost does not depend on the texture content.

Usage:  python benchmarks/bench_corruptions.py [--n 10000] [--small-n 1000] [--repeats 5]
            [--threads 1] [--only fog,snow]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from calib_pipeline.data.corruptions import FROST_FILES, corrupt, corruption_names

TARGET_IMAGES_PER_SECOND = 100.0


def synthetic_images(n: int, side: int = 32, seed: int = 0) -> torch.Tensor:
    """Structured colour images: a smooth random background plus a random bright rectangle."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(n, 3, 4, 4, generator=generator)
    images = 0.7 * F.interpolate(coarse, size=(side, side), mode="bicubic", align_corners=False)
    corners = torch.randint(0, side // 2, (n, 2), generator=generator)
    rows = torch.arange(side).view(1, side, 1)
    cols = torch.arange(side).view(1, 1, side)
    top, left = corners[:, :1, None], corners[:, 1:, None]
    box = (rows >= top) & (rows < top + side // 3) & (cols >= left) & (cols < left + side // 3)
    images = images + 0.3 * box[:, None].float() * torch.rand(n, 3, 1, 1, generator=generator)
    return images.clamp(0, 1)


def write_frost_textures(folder: Path) -> None:
    rng = np.random.default_rng(0)
    for name in FROST_FILES:
        pixels = (rng.random((400, 600, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / name)


def seconds(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def all_severities(images: torch.Tensor, name: str, frost_dir: Path) -> Callable[[], None]:
    def run() -> None:
        for severity in range(1, 6):
            corrupt(images, name, severity, seed=severity, frost_dir=frost_dir)

    return run


def anchor(images: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        for _ in range(5):  # five passes, like the five severities
            TF.gaussian_blur(images, kernel_size=[9, 9], sigma=[1.0, 1.0])

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="full batch (0 to skip)")
    parser.add_argument("--small-n", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated corruption names")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = args.only.split(",") if args.only else corruption_names()

    with tempfile.TemporaryDirectory() as folder:
        frost_dir = Path(folder)
        write_frost_textures(frost_dir)
        small = synthetic_images(args.small_n)
        anchor_small = statistics.median(seconds(anchor(small)) for _ in range(args.repeats))
        full = synthetic_images(args.n) if args.n else None
        anchor_full = seconds(anchor(full)) if args.n else float("nan")
        print(
            f"threads={args.threads}  small batch {args.small_n} images x {args.repeats} "
            f"repeats (median)  full batch {args.n} images x 1 run"
        )
        print(
            f"anchor (torchvision gaussian_blur, 5 passes): "
            f"{5 * args.small_n / anchor_small:,.0f} img/s small"
            + (f", {5 * args.n / anchor_full:,.0f} img/s full" if args.n else "")
        )
        header = (
            f"{'corruption':18s} {'img/s small':>12s} {'x anchor':>9s} "
            f"{'extrap. s for N':>15s} {'img/s full':>11s} {'s full':>8s}"
        )
        print(header)
        print("-" * len(header))
        rates = {}
        for name in names:
            work = all_severities(small, name, frost_dir)
            work()  # warm-up: caches (frost textures), allocator
            median = statistics.median(seconds(work) for _ in range(args.repeats))
            rate_small = 5 * args.small_n / median
            line = (
                f"{name:18s} {rate_small:12,.0f} {median / anchor_small:9.1f} "
                f"{5 * (args.n or args.small_n) / rate_small:15.1f}"
            )
            rate = rate_small
            if args.n:
                elapsed = seconds(all_severities(full, name, frost_dir))
                rate = 5 * args.n / elapsed
                line += f" {rate:11,.0f} {elapsed:8.1f}"
            rates[name] = min(rate, rate_small)
            print(line, flush=True)
        slowest = min(rates, key=rates.get)
        verdict = "meets" if rates[slowest] >= TARGET_IMAGES_PER_SECOND else "MISSES"
        print(
            f"\nslowest: {slowest} at {rates[slowest]:,.0f} img/s (lower of small and full): "
            f"{verdict} the {TARGET_IMAGES_PER_SECOND:.0f} img/s target"
        )


if __name__ == "__main__":
    main()

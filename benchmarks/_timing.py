"""Timing shared by the benchmark scripts (not a benchmark itself: ``make bench`` runs
``bench_*.py`` only)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def seconds_per_call(step: Callable[[], object], calls: int, device: torch.device) -> float:
    """Mean wall seconds of ``calls`` consecutive calls of ``step``; on CUDA the device is
    synchronised before and after, so queued kernels are counted."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / calls

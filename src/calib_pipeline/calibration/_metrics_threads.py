"""Thread-level blocking of the CPU metric kernels: one parallel region per pass.

The scan and the binning work on cache-sized blocks (a few MiB). Run as torch ops on
all threads, every op of every block is a parallel region that waits for its slowest
thread: ~600 regions per ECE of 1,000,000 x 100. On a quiet machine that costs nothing, but
when other processes compete for the cores each region waits for a descheduled thread, and
at high load an ECE took longer than torchmetrics, which has few large ops
(docs/performance.md).

:func:`run_blocks` therefore gives whole blocks to threads instead: ``torch.get_num_threads()``
pool threads, each running torch single-threaded, claim block after block of one pass, and
the caller waits once, at the end of the pass. A descheduled thread delays only its own
block while the others take the remaining ones. A block's ops run single-threaded on a
whole block of 64-row multiples, which rounds exactly as the former split over 1 or 2
threads did (see ``_metrics_kernels._block_rows``), so results are unchanged there -- and
no longer depend on the thread count at all.

Measured on 2 busy cores, these pool threads beat every block size of ops split over the
threads and torchmetrics; fewer, larger blocks alone fall out of cache and still stall. On
the idle machine the pool is as fast as the split was (the figures: docs/performance.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait

import torch

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _forget_pools() -> None:
    """In a forked child: the parent's pools have no threads there (and the lock may have
    been held by a thread that the child does not have)."""
    global _pools_lock
    _pools.clear()
    _pools_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools)


def _become_single_threaded(ready: threading.Barrier) -> None:
    # ATen sets a new thread's count from a process-wide default at the thread's first
    # torch call, so make that call first, then set this thread's own count
    torch.get_num_threads()
    torch.set_num_threads(1)
    ready.wait()


def _pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` single-threaded torch threads, started once."""
    with _pools_lock:
        if threads not in _pools:
            pool = ThreadPoolExecutor(threads, thread_name_prefix="calib-metrics")
            # the barrier holds every task until all ``threads`` threads have started
            ready = threading.Barrier(threads + 1)
            for _ in range(threads):
                pool.submit(_become_single_threaded, ready)
            ready.wait()
            # torch.set_num_threads also sets process-wide defaults (the count of threads
            # started later, MKL, the QNNPACK pool): give them back the caller's count
            torch.set_num_threads(threads)
            _pools[threads] = pool
        return _pools[threads]


def _claims(count: int) -> Callable[[], Iterator[int]]:
    """A maker of iterators that share 0 .. count - 1: each index goes to one of them."""
    lock = threading.Lock()
    indices = iter(range(count))

    def claim() -> Iterator[int]:
        while True:
            with lock:
                index = next(indices, None)
            if index is None:
                return
            yield index

    return claim


def run_blocks(process: Callable[[Iterator[int]], None], count: int, on_cuda: bool) -> None:
    """``process(blocks)`` over the block indices 0 .. count - 1, on every torch thread.

    ``process`` receives an iterator of block indices and handles each; on CPU with more than
    one torch thread, each pool thread calls it once (blocks are claimed as threads become
    free, so a descheduled thread holds up at most one block) and ``process`` runs with
    torch single-threaded. It must write each block's results to their own place (the
    order in which blocks finish varies). On CUDA, or on one thread, the caller runs all
    blocks in order. Returns when every thread is done; the first exception raised in a
    thread is then re-raised here.
    """
    threads = 1 if on_cuda else torch.get_num_threads()
    if threads == 1:
        process(iter(range(count)))
        return
    claim = _claims(count)
    pool = _pool(threads)
    futures = [pool.submit(process, claim()) for _ in range(min(threads, count))]
    wait(futures)
    for future in futures:
        future.result()

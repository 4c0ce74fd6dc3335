"""Thread-level blocking of the metric kernels (``_metrics_threads.run_blocks``).

Every block is handled exactly once, pool threads run torch single-threaded without
changing the caller's thread count, errors surface in the caller, and the statistics and
metrics are bit-identical on 1, 2 and 3 threads: the same as the caller running every
block in order on one thread, for odd sizes, many blocks, both scan layouts, probability
input and batched runs.
"""

import multiprocessing
import threading

import pytest
import torch

from calib_pipeline.calibration import _metrics_binning as binning
from calib_pipeline.calibration import _metrics_fused as fused
from calib_pipeline.calibration import _metrics_kernels as kernels
from calib_pipeline.calibration import _metrics_threads as blocking
from calib_pipeline.calibration import metrics as M

# every test runs with both scans of CPU logits (fused and eager torch)
pytestmark = pytest.mark.usefixtures("scan_path")


@pytest.fixture
def threads():
    """Restores torch's thread count after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("count", [1, 2, 5, 64])
def test_every_block_is_handled_once_by_a_single_threaded_torch(threads, n_threads, count):
    torch.set_num_threads(n_threads)
    handled, torch_threads = [], set()
    lock = threading.Lock()

    def process(blocks):
        for index in blocks:
            with lock:
                handled.append(index)
                torch_threads.add(torch.get_num_threads())

    blocking.run_blocks(process, count, on_cuda=False)
    assert sorted(handled) == list(range(count))
    assert torch_threads == {1}
    assert torch.get_num_threads() == n_threads


def test_starting_a_pool_keeps_the_callers_and_new_threads_thread_count(threads):
    torch.set_num_threads(5)  # a size no other test starts a pool for
    blocking.run_blocks(lambda blocks: list(blocks), 5, on_cuda=False)
    fresh = []
    thread = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    assert torch.get_num_threads() == 5
    assert fresh == [5]


def test_an_error_in_a_block_is_raised_in_the_caller(threads):
    torch.set_num_threads(2)
    handled = []

    def process(blocks):
        for index in blocks:
            if index == 3:
                raise ValueError("block 3 failed")
            handled.append(index)

    with pytest.raises(ValueError, match="block 3 failed"):
        blocking.run_blocks(process, 10, on_cuda=False)
    assert sorted(handled) == [i for i in range(10) if i != 3]  # the others still ran


def _handle_blocks_in_a_forked_child(_):
    handled = []
    blocking.run_blocks(lambda blocks: handled.extend(blocks), 4, on_cuda=False)
    return sorted(handled)


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
def test_a_forked_child_starts_its_own_pool(threads):
    torch.set_num_threads(2)
    blocking.run_blocks(lambda blocks: list(blocks), 2, on_cuda=False)  # the parent's pool
    with multiprocessing.get_context("fork").Pool(1) as pool:
        result = pool.map_async(_handle_blocks_in_a_forked_child, [0]).get(timeout=60)
    assert result == [[0, 1, 2, 3]]


def _statistics_and_metrics(logits, labels, inputs, batched):
    if batched:
        pred = kernels.Predictions.batched(logits, labels, inputs)
        values = M.calibration_metrics_batched(
            logits, labels, inputs=inputs, keys=["ece", "ece_em", "mce", "ece_l2", "ece_lb"]
        )
    else:
        pred = kernels.Predictions.single(logits, labels, inputs)
        values = {
            f"{scheme}/{norm}/{closure}": M.ece(
                logits, labels, inputs=inputs, scheme=scheme, norm=norm, closure=closure
            )
            for scheme in binning.SCHEMES
            for norm in binning.NORMS
            for closure in binning.CLOSURES
        }
    edges, count, conf_sum, hits = binning.binned(
        pred.confidence, pred.correct, 15, "mass", "right"
    )
    statistics = {
        "confidence": pred.confidence,
        "correct": pred.correct,
        "edges": edges,
        "count": count,
        "conf_sum": conf_sum,
        "hits": hits,
    }
    return statistics | {key: torch.as_tensor(value) for key, value in values.items()}


CASES = {
    # (shape of the runs' samples, classes): odd sizes around the 64-row blocks
    "one sample": ((1,), 3),
    "short rows": ((1001,), 10),
    "transposition limit": ((4097,), kernels.SHORT_ROWS),
    "compiled transposition limit": ((2049,), fused.SHORT_ROWS),
    "long rows": ((3001,), 100),
    "batched runs": ((7, 333), 5),
    "batched long rows": ((3, 650), 40),
}


@pytest.mark.parametrize("small_blocks", [True, False])
@pytest.mark.parametrize("inputs", ["logits", "probs"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_results_on_any_thread_count_equal_one_thread_in_order(
    threads, monkeypatch, case, inputs, small_blocks
):
    if small_blocks:  # many scan and binning blocks, split unevenly between the threads
        monkeypatch.setattr(kernels, "_BLOCK_ELEMENTS", 64 * 64)
        monkeypatch.setattr(binning, "_SAMPLE_BLOCK", 500)
    shape, k = CASES[case]
    g = torch.Generator().manual_seed(len(case) + k)
    logits = torch.randn(*shape, k, generator=g) * 3
    labels = torch.randint(0, k, shape, generator=g)
    scores = logits if inputs == "logits" else torch.softmax(logits.double(), -1)
    batched = len(shape) == 2
    torch.set_num_threads(1)  # run_blocks: the caller handles every block in order
    expected = _statistics_and_metrics(scores, labels, inputs, batched)
    for n_threads in (2, 3):
        torch.set_num_threads(n_threads)
        found = _statistics_and_metrics(scores, labels, inputs, batched)
        for key, value in expected.items():
            assert torch.equal(found[key], value), (n_threads, key)

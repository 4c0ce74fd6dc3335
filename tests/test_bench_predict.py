"""benchmarks/bench_predict.py: it times the env's model at the run's eval batch against
batches of 1,024, after checking both predict the same logits."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "benchmarks/bench_predict.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_script_times_each_batch_against_the_anchor_after_comparing_logits():
    done = _bench("--env", "fashion_mnist", "--images", "300", "--rounds", "1", "--batches", "100")

    assert done.returncode == 0, done.stderr
    differences = re.findall(
        r"batch (\d+): largest \|logit difference\| from batch 1024: (\S+)", done.stdout
    )
    assert [batch for batch, _ in differences] == ["1024", "128", "100"]
    assert all(float(value) < 1e-4 for _, value in differences)
    assert "small_cnn {'width': 32, 'feature_dim': 128, 'pool_grid': 7}, 300 images" in done.stdout
    assert re.search(r"batch  1024 \(anchor\): [\d,]+ images/s, 1\.00x the anchor", done.stdout)
    assert re.search(
        r"batch   128 \(the run's eval_batch_size\): [\d,]+ images/s, [\d.]+x", done.stdout
    )
    assert re.search(r"batch   100: [\d,]+ images/s, [\d.]+x the anchor", done.stdout)


def test_a_count_below_one_is_refused():
    done = _bench("--rounds", "0")

    assert done.returncode == 2 and "must be >= 1, got 0" in done.stderr

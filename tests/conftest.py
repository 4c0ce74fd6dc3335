import os

import pytest
import torch

# Small models train faster on one thread, and CI has two cores.
torch.set_num_threads(1)

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield

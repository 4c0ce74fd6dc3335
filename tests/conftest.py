import os

import pytest
import torch

# Small models train faster on one thread, and CI has two cores.
torch.set_num_threads(1)

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MPLBACKEND", "Agg")
# Dask's scheduler and workers log every event at INFO; the runner sets this too, on import.
os.environ.setdefault("DASK_DISTRIBUTED__LOGGING__DISTRIBUTED", "warning")


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture
def forward_batches(monkeypatch) -> list[int]:
    """The batch sizes the network of every checkpoint predictor built from now on is called
    with (prediction runs ``forward_features`` then ``head``: the head sees each batch once)."""
    from calib_pipeline.training import predict

    seen: list[int] = []
    build = predict.model_from_checkpoint

    def observed(checkpoint):
        model = build(checkpoint)
        model.head.register_forward_pre_hook(lambda _module, args: seen.append(len(args[0])))
        return model

    monkeypatch.setattr(predict, "model_from_checkpoint", observed)
    return seen

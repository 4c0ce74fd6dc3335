"""The resume store: safe loading, unique temporary files, one holder at a time."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from calib_pipeline.tensor_io import load_tensors
from calib_pipeline.training.checkpoint import CheckpointStore
from tests.crafted import MarkerPayload


def test_a_crafted_resume_state_is_refused_and_runs_no_code(tmp_path):
    store = CheckpointStore(tmp_path / "run")
    store.directory.mkdir()
    marker = tmp_path / "pwned"
    torch.save({"epoch": 1, "payload": MarkerPayload(str(marker))}, store.path)
    with pytest.raises(
        ValueError, match=r"resume state .*latest.pt holds objects that could run code"
    ):
        store.load()
    assert not marker.exists(), "loading must not have executed the payload"


def test_a_truncated_state_names_the_file(tmp_path):
    store = CheckpointStore(tmp_path / "run")
    store.save({"epoch": 3, "weights": torch.arange(1000.0)})
    store.path.write_bytes(store.path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"resume state .*run/latest.pt is truncated or corrupt"):
        store.load()


def test_saved_state_round_trips_and_leaves_no_temporary_file(tmp_path):
    store = CheckpointStore(tmp_path / "run")
    state = {
        "epoch": 2,
        "history": [{"epoch": 1, "loss": 0.5}],
        "best": (0.1, 1, {"w": torch.ones(2)}),
    }
    store.save(state)
    loaded = store.load()
    assert loaded["history"] == state["history"] and torch.equal(
        loaded["best"][2]["w"], torch.ones(2)
    )
    assert sorted(p.name for p in store.directory.iterdir()) == ["latest.pt"]
    assert load_tensors(store.path)["epoch"] == 2


def test_a_second_holder_waits_and_is_told_who_holds_the_folder(tmp_path, caplog):
    store = CheckpointStore(tmp_path / "run")
    order: list[str] = []
    entered = threading.Event()

    def first() -> None:
        with store.lock("ce seed 0 (first)"):
            entered.set()
            time.sleep(0.3)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    entered.wait(5)
    with caplog.at_level("WARNING"), CheckpointStore(tmp_path / "run").lock("ce seed 0 (second)"):
        order.append("second in")
    thread.join()
    assert order == ["first done", "second in"]
    assert f"process {os.getpid()}" in caplog.text and "holds its resume folder" in caplog.text

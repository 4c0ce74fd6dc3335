"""The report folder dataset: what a save writes, what a load returns, and what it refuses."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from kedro.io import DatasetError
from kedro.io.core import Version

from calib_pipeline.kedro_datasets import ReportDataset


def test_a_save_writes_each_artifact_by_type_and_a_load_reads_them_back(tmp_path):
    figure, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    table = pd.DataFrame({"method": ["CE", "FL"], "ece": [0.031, 0.012]})
    dataset = ReportDataset(filepath=str(tmp_path / "report"), version=Version(None, "2026-11-26T01.00.00.000Z"))
    assert dataset.saved_folder is None
    dataset.save({"table": table, "note": "# Summary\n", "figure": figure, "meta": {"bins": [15]}})
    folder = dataset.saved_folder
    assert folder == tmp_path / "report" / "2026-11-26T01.00.00.000Z" / "report"
    assert sorted(p.name for p in folder.iterdir()) == [
        "figure.png", "meta.json", "note.md", "table.csv", "table.md"
    ]
    assert not plt.fignum_exists(figure.number)  # closed once written
    loaded = dataset.load()
    pd.testing.assert_frame_equal(loaded["table"], table)
    assert loaded["note"] == "# Summary\n"
    assert loaded["figure"].endswith("figure.png") and loaded["meta"].endswith("meta.json")


def test_an_unsupported_artifact_is_refused_with_its_name(tmp_path):
    dataset = ReportDataset(filepath=str(tmp_path / "report"), version=Version(None, "2026-11-26T01.00.00.000Z"))
    with pytest.raises(DatasetError, match="report artifact 'weights' has unsupported type int"):
        dataset.save({"weights": 3})

"""The report folder dataset: what a save writes, what a load returns, and what it refuses;
a save that fails or is killed never leaves a version that "latest" resolves to."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from kedro.io import DatasetError
from kedro.io.core import Version

import calib_pipeline
from calib_pipeline.kedro_datasets import ReportDataset

FIRST, SECOND = "2026-11-26T01.00.00.000Z", "2026-11-26T02.00.00.000Z"
TABLE = pd.DataFrame({"method": ["CE", "FL"], "ece": [0.031, 0.012]})


def report(tmp_path: Path, version: str | None) -> ReportDataset:
    """The report dataset under ``tmp_path``: saving as ``version``, loading the latest."""
    return ReportDataset(filepath=str(tmp_path / "report"), version=Version(None, version))


class FailingFigure:
    """A figure whose PNG is cut short by an error (a full disk, a bug in a drawing)."""

    def savefig(self, path, **options):
        Path(path).write_bytes(b"\x89PNG partial")
        raise OSError("No space left on device")


def test_a_save_writes_each_artifact_by_type_and_a_load_reads_them_back(tmp_path):
    figure, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    table = pd.DataFrame({"method": ["CE", "FL"], "ece": [0.031, 0.012]})
    dataset = ReportDataset(
        filepath=str(tmp_path / "report"), version=Version(None, "2026-11-26T01.00.00.000Z")
    )
    assert dataset.saved_folder is None
    dataset.save({"table": table, "note": "# Summary\n", "figure": figure, "meta": {"bins": [15]}})
    folder = dataset.saved_folder
    assert folder == tmp_path / "report" / "2026-11-26T01.00.00.000Z" / "report"
    assert sorted(p.name for p in folder.iterdir()) == [
        ".manifest.json",
        "figure.pdf",
        "figure.png",
        "meta.json",
        "note.md",
        "table.csv",
        "table.md",
        "table.tex",
    ]
    assert sorted(p.name for p in folder.parent.iterdir()) == ["report"]  # no temporary left
    assert not plt.fignum_exists(figure.number)  # closed once written
    loaded = dataset.load()
    pd.testing.assert_frame_equal(loaded["table"], table)
    assert loaded["note"] == "# Summary\n"
    assert loaded["figure"].endswith("figure.png") and loaded["meta"].endswith("meta.json")


def test_an_unsupported_artifact_is_refused_with_its_name(tmp_path):
    dataset = ReportDataset(
        filepath=str(tmp_path / "report"), version=Version(None, "2026-11-26T01.00.00.000Z")
    )
    with pytest.raises(DatasetError, match="report artifact 'weights' has unsupported type int"):
        dataset.save({"weights": 3})


def test_a_failed_save_leaves_no_version_and_the_previous_one_stays_latest(tmp_path):
    report(tmp_path, FIRST).save({"table": TABLE})
    with pytest.raises(DatasetError, match="No space left on device"):
        report(tmp_path, SECOND).save({"table": TABLE.head(1), "figure": FailingFigure()})
    assert [p.name for p in (tmp_path / "report").iterdir()] == [FIRST]  # nothing of SECOND
    latest = report(tmp_path, None)
    assert latest.resolve_load_version() == FIRST
    pd.testing.assert_frame_equal(latest.load()["table"], TABLE)


def test_a_killed_save_is_never_latest(tmp_path):
    report(tmp_path, FIRST).save({"table": TABLE})
    # the writing process dies mid-write: no exception handler runs
    script = textwrap.dedent(
        f"""
        import os, signal
        import pandas as pd
        from kedro.io.core import Version
        from calib_pipeline.kedro_datasets import ReportDataset

        class DyingFigure:
            def savefig(self, path, **options):
                os.kill(os.getpid(), signal.SIGKILL)

        dataset = ReportDataset(
            filepath={str(tmp_path / "report")!r}, version=Version(None, {SECOND!r})
        )
        dataset.save({{"table": pd.DataFrame({{"x": [1]}}), "figure": DyingFigure()}})
        """
    )
    source = str(Path(calib_pipeline.__file__).resolve().parents[1])
    path = os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])
    killed = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr.decode()
    leftovers = [p.name for p in (tmp_path / "report" / SECOND).iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".report.")  # the hidden temporary
    latest = report(tmp_path, None)
    assert latest.resolve_load_version() == FIRST
    pd.testing.assert_frame_equal(latest.load()["table"], TABLE)


def test_an_incomplete_folder_is_never_latest_and_refuses_to_load(tmp_path):
    report(tmp_path, FIRST).save({"table": TABLE})
    empty = tmp_path / "report" / SECOND / "report"
    empty.mkdir(parents=True)  # what a killed write of an older version left behind
    assert report(tmp_path, None).resolve_load_version() == FIRST
    pinned = ReportDataset(filepath=str(tmp_path / "report"), version=Version(SECOND, None))
    with pytest.raises(DatasetError, match=f"report folder .*{SECOND}/report is incomplete"):
        pinned.load()
    empty.rmdir()
    (tmp_path / "report" / FIRST / "report" / ".manifest.json").unlink()
    assert not report(tmp_path, None).exists()


def test_a_damaged_artifact_is_named(tmp_path):
    dataset = report(tmp_path, FIRST)
    dataset.save({"table": TABLE, "note": "# Summary\n"})
    (dataset.saved_folder / "table.csv").write_text("method,ece\nCE,", encoding="utf-8")
    damaged = "damaged: 'table.csv' missing, outside the folder or not of the size written"
    with pytest.raises(DatasetError, match=damaged):
        report(tmp_path, None).load()

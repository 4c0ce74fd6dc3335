"""A run writes only under its data folder: nothing in the checkout changes (kedro-viz's
plugin hooks once rewrote .viz/*.json there on every run)."""

from __future__ import annotations

import subprocess

import pytest

from tests.test_end_to_end import PROJECT, kedro

pytestmark = pytest.mark.slow


def checkout_state() -> str:
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", ".viz"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        check=True,
    )
    return status.stdout


def test_a_run_with_its_own_data_folder_leaves_the_checkout_alone(tmp_path):
    before = checkout_state()
    kedro(
        "--pipelines=data_split", data_dir=tmp_path / "data", tracking=f"sqlite:///{tmp_path}/m.db"
    )
    assert checkout_state() == before
    assert not (PROJECT / ".viz" / "kedro_pipeline_events.json").exists()

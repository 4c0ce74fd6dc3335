"""Synthetic studies shared by the paper report tests (built once per session)."""

import matplotlib.pyplot as plt
import pytest

from tests.reports import synthetic


@pytest.fixture(autouse=True)
def _close_figures():
    """Reports draw figures that nothing saves here; close them so they do not pile up."""
    yield
    plt.close("all")


@pytest.fixture(scope="session")
def ls_table():
    return synthetic.ls_table()


@pytest.fixture(scope="session")
def focal_results():
    return synthetic.focal_study()


@pytest.fixture(scope="session")
def soft_results():
    return synthetic.soft_study()


@pytest.fixture(scope="session")
def dark_results():
    return synthetic.dark_study()

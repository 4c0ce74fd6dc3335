"""The ``>>>`` examples in the docstrings of the public entry points run and hold.

Append a module to ``DOCTEST_MODULES`` when its docstrings gain examples.
"""

import doctest
import importlib

import pytest

DOCTEST_MODULES = [
    "calib_pipeline.calibration.metrics",
    "calib_pipeline.calibration.losses",
    "calib_pipeline.calibration.posthoc",
    "calib_pipeline.models.registry",
    "calib_pipeline.reports.mukhoti",
    "calib_pipeline.reports.common",
]


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    # report=True prints each failing example with its expected and actual output
    results = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, report=True)
    # a module listed here whose examples were all deleted would otherwise pass silently
    assert results.attempted > 0, f"{name} has no docstring examples"
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed in {name}"

"""The report registry: needs, declared options and their checks before anything runs."""

import pytest

from calib_pipeline.reports.registry import report_needs


def test_needs_are_registered():
    assert report_needs("mukhoti_table") == ("calibrators",)
    assert report_needs("mukhoti_curves") == ("histories",)
    assert (
        report_needs("karandikar_table")
        == report_needs("karandikar_effects")
        == report_needs("singh_table")
        == ()
    )
    assert report_needs("singh_density") == ("logits", "calibrators")

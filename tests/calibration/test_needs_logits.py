"""``needs_logits``: a calibrator that says it reads only softmax(logits) fits and predicts the
same when every row of its logits is shifted by a constant (log-probabilities stand in for
logits); one that needs logits does not."""

import pytest
import torch

from calib_pipeline.calibration.posthoc import CALIBRATORS, build_calibrator


def shifted_fits(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Test probabilities of ``name`` fitted on logits, and fitted on the same logits with a
    random constant added to each row (val and test)."""
    g = torch.Generator().manual_seed(0)
    n, k = 300, 3
    labels = torch.randint(0, k, (n,), generator=g)
    logits = 2 * torch.randn(n, k, generator=g, dtype=torch.float64)
    logits[torch.arange(n), labels] += 2
    test = 2 * torch.randn(50, k, generator=g, dtype=torch.float64)
    shift, test_shift = (5 * torch.randn(m, 1, generator=g, dtype=torch.float64) for m in (n, 50))
    plain = build_calibrator(name).fit(logits, labels).predict_proba(test)
    moved = build_calibrator(name).fit(logits + shift, labels).predict_proba(test + test_shift)
    return plain, moved


@pytest.mark.parametrize("name", CALIBRATORS.names())
def test_needs_logits_says_whether_a_row_constant_matters(name):
    plain, moved = shifted_fits(name)
    difference = float((plain - moved).abs().max())
    if CALIBRATORS.factory(name).needs_logits:
        assert difference > 1e-2, f"{name} claims to need logits but ignores row constants"
    else:
        assert difference < 1e-9, (
            f"{name} claims to read only softmax(logits) but moved by {difference}"
        )


def test_only_the_logit_affine_maps_and_the_parameterized_temperature_need_logits():
    assert [n for n in CALIBRATORS.names() if CALIBRATORS.factory(n).needs_logits] == [
        "matrix_scaling",
        "parameterized_ts",
        "vector_scaling",
    ]

"""Deep ensembles from cached logits: averaged probabilities, checked by hand."""

import math

import pytest
import torch

from calib_pipeline.calibration.ensembles import (
    SMALLEST_PROBABILITY,
    calibrate_then_pool,
    pooled_logits,
    pooled_probabilities,
)
from calib_pipeline.calibration.posthoc import build_calibrator

MEMBER_A = [[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]]
MEMBER_B = [[0.0, 1.0, 0.0], [-2.0, 3.0, 1.0]]


def softmax_by_hand(row, temperature=1.0):
    exps = [math.exp(z / temperature) for z in row]
    return [e / sum(exps) for e in exps]


def mean_by_hand(*rows):
    return [sum(values) / len(values) for values in zip(*rows)]


def test_the_ensemble_averages_its_members_probabilities_not_their_logits():
    expected = [
        mean_by_hand(softmax_by_hand(a), softmax_by_hand(b)) for a, b in zip(MEMBER_A, MEMBER_B)
    ]
    pooled = pooled_probabilities([torch.tensor(MEMBER_A), torch.tensor(MEMBER_B)])
    assert pooled.dtype == torch.float64
    assert torch.allclose(pooled, torch.tensor(expected, dtype=torch.float64), atol=1e-15)
    logit_mean = torch.softmax((torch.tensor(MEMBER_A) + torch.tensor(MEMBER_B)) / 2, dim=1)
    assert not torch.allclose(pooled, logit_mean.double(), atol=1e-3)


def test_the_ensembles_logits_are_the_log_of_its_probabilities():
    members = [torch.tensor(MEMBER_A), torch.tensor(MEMBER_B)]
    logits = pooled_logits(members)
    assert torch.allclose(logits.exp(), pooled_probabilities(members), atol=1e-15)
    assert torch.allclose(torch.softmax(logits, dim=1), pooled_probabilities(members))


def test_a_class_every_member_rules_out_keeps_a_finite_logit():
    certain = torch.tensor([[0.0, -1e4, 0.0]])
    logits = pooled_logits([certain, certain])
    assert torch.isfinite(logits).all()
    assert logits[0, 1].item() == pytest.approx(math.log(SMALLEST_PROBABILITY))


def test_pool_then_calibrate_scales_the_log_of_the_averaged_probabilities():
    members = [torch.tensor(MEMBER_A), torch.tensor(MEMBER_B)]
    scaler = build_calibrator("temperature_fixed", temperature=2.0).fit(
        pooled_logits(members), torch.tensor([0, 1])
    )
    calibrated = scaler.predict_proba(pooled_logits(members))
    # softmax(log p̄ / T) = p̄^(1/T) / Σ p̄^(1/T)
    for row, pooled in zip(calibrated.tolist(), pooled_probabilities(members).tolist()):
        powered = [p**0.5 for p in pooled]
        assert row == pytest.approx([p / sum(powered) for p in powered], abs=1e-12)
    assert not torch.allclose(calibrated, pooled_probabilities(members), atol=1e-3)


def test_calibrate_then_pool_averages_each_members_own_calibrated_probabilities():
    labels = torch.tensor([0, 1])
    hot = build_calibrator("temperature_fixed", temperature=2.0).fit(torch.zeros(2, 3), labels)
    cold = build_calibrator("temperature_fixed", temperature=0.5).fit(torch.zeros(2, 3), labels)
    pooled = calibrate_then_pool([hot, cold], [torch.tensor(MEMBER_A), torch.tensor(MEMBER_B)])
    expected = [
        mean_by_hand(softmax_by_hand(a, 2.0), softmax_by_hand(b, 0.5))
        for a, b in zip(MEMBER_A, MEMBER_B)
    ]
    assert torch.allclose(pooled, torch.tensor(expected, dtype=torch.float64), atol=1e-12)
    swapped = calibrate_then_pool([cold, hot], [torch.tensor(MEMBER_A), torch.tensor(MEMBER_B)])
    assert not torch.allclose(pooled, swapped)  # each member keeps its own calibrator


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: pooled_probabilities([torch.zeros(2, 3)]), "at least 2 members, got 1"),
        (
            lambda: pooled_probabilities([torch.zeros(2, 3), torch.zeros(3, 3)]),
            r"share one N × K shape, got shapes \[\(2, 3\), \(3, 3\)\]",
        ),
        (
            lambda: calibrate_then_pool(
                [build_calibrator("temperature_fixed")], [torch.zeros(2, 3), torch.zeros(2, 3)]
            ),
            r"one calibrator per member: 1 calibrator\(s\) for 2 member\(s\)",
        ),
    ],
)
def test_malformed_ensembles_fail_naming_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()

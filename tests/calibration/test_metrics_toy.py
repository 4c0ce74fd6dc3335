"""Hand-computed toy cases: every metric key against a value worked out on paper.

The main toy (probabilities, K = 2):

    sample  p(class 0)  label  confidence  prediction  correct
    0       0.90        0      0.90        0           1
    1       0.75        1      0.75        0           0
    2       0.35        1      0.65        1           1
    3       0.45        0      0.55        1           0

With 5 equal-width bins (edges 0, .2, .4, .6, .8, 1): bin (.8,1] = {0.90: correct},
bin (.6,.8] = {0.75: wrong, 0.65: correct}, bin (.4,.6] = {0.55: wrong}.
With 2 equal-mass bins: {0.55 wrong, 0.65 correct} and {0.75 wrong, 0.90 correct}.
"""

import math

import pytest
import torch

from calib_pipeline.calibration import metrics as M

PROBS = torch.tensor([[0.90, 0.10], [0.75, 0.25], [0.35, 0.65], [0.45, 0.55]], dtype=torch.float64)
LABELS = torch.tensor([0, 1, 1, 0])


def _entropy(p):
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


EXPECTED = {
    "accuracy": 0.5,
    "error": 0.5,
    "nll": -(math.log(0.9) + math.log(0.25) + math.log(0.65) + math.log(0.45)) / 4,
    # per sample sum_k (p_k - y_k)^2: 2*.1^2, 2*.75^2, 2*.35^2, 2*.55^2
    "brier": (0.02 + 1.125 + 0.245 + 0.605) / 4,
    "mean_confidence": 0.7125,
    "mean_entropy": sum(_entropy(p) for p in (0.9, 0.75, 0.65, 0.55)) / 4,
    # bins: (.8,1] gap |1-.9|=.1 w=1/4; (.6,.8] acc .5 conf .7 gap .2 w=1/2; (.4,.6] gap .55 w=1/4
    "ece": 0.25 * 0.1 + 0.5 * 0.2 + 0.25 * 0.55,
    "mce": 0.55,
    # equal-mass 2 bins: {.55 x, .65 v} acc .5 conf .6; {.75 x, .9 v} acc .5 conf .825
    "ece_em": 0.5 * 0.1 + 0.5 * 0.325,
    "ece_l2": math.sqrt(0.5 * 0.1**2 + 0.5 * 0.325**2),
    # label-binned: |.5-.55|, |.5-.65|, |.5-.75|, |.5-.9|
    "ece_lb": math.sqrt((0.05**2 + 0.15**2 + 0.25**2 + 0.4**2) / 4),
    # class 0: p = .9(y=0) .75 .35 .45(y=0) in bins 4,3,1,2 -> gaps .1,.75,.35,.55;
    # class 1 mirrors it
    "classwise_ece": (0.1 + 0.75 + 0.35 + 0.55) / 4,
    # sum_b w_b conf_b max(conf_b - acc_b, 0): (.6,.8] .5*.7*.2; (.4,.6] .25*.55*.55
    "overconfidence_error": 0.5 * 0.7 * 0.2 + 0.25 * 0.55 * 0.55,
    # both equal-mass bins have n=2, acc .5: .1^2 - .25 < 0 and .325^2 - .25 < 0 -> clamp 0
    "debiased_ece_l2": 0.0,
    # correct {.9, .65} vs wrong {.75, .55}: .9>.75, .9>.55, .65>.55 -> 3 of 4 pairs
    "auroc": 0.75,
    "decomp_alpha": 0.7125,
    "decomp_beta": 0.75 * 2 * 2 * 2 / 16,
    "decomp_gamma": (4 + 4) / 32,
    # ascending: .55 x, .65 v, .75 x, .9 v; c - correct: .55, -.35, .75, -.1; partial sums
    # .55, .2, .95, .85 -> max .95 / N
    "ks_error": 0.95 / 4,
    # descending: .9 v, .75 x, .65 v, .55 x; selective risk at coverage 1/4 .. 1: 0, 1/2,
    # 1/3, 1/2, closed by (0, 0); trapezoids of width 1/4
    "aurc": 0.25 * (0 + 0) / 2
    + 0.25 * (0 + 0.5) / 2
    + 0.25 * (0.5 + 1 / 3) / 2
    + 0.25 * (1 / 3 + 0.5) / 2,
    # generalised risk (errors / 4): 0, 1/4, 1/4, 1/2, closed by (0, 0)
    "augrc": 0.25 * (0 + 0.25) / 2 + 0.25 * (0.25 + 0.25) / 2 + 0.25 * (0.25 + 0.5) / 2,
}
OPTIONS = {
    "ece": {"n_bins": 5},
    "mce": {"n_bins": 5},
    "classwise_ece": {"n_bins": 5},
    "overconfidence_error": {"n_bins": 5},
    "ece_em": {"n_bins": 2},
    "ece_l2": {"n_bins": 2},
    "ece_lb": {"n_bins": 2},
    "debiased_ece_l2": {"n_bins": 2},
}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_hand_computed_toy_value(key):
    value = getattr(M, key)(PROBS, LABELS, inputs="probs", **OPTIONS.get(key, {}))
    assert value.ndim == 0 and value.dtype == torch.float64
    assert float(value) == pytest.approx(EXPECTED[key], abs=1e-12)


def test_logits_give_the_same_values_as_their_probabilities():
    logits = PROBS.log()
    for key, expected in EXPECTED.items():
        from_logits = float(getattr(M, key)(logits, LABELS, **OPTIONS.get(key, {})))
        assert from_logits == pytest.approx(expected, abs=1e-12), key


def test_ece_l2_width_and_left_closure_toy():
    # same width bins as 'ece'; no confidence sits on an edge, so left closure agrees
    expected = math.sqrt(0.25 * 0.1**2 + 0.5 * 0.2**2 + 0.25 * 0.55**2)
    assert float(M.ece(PROBS, LABELS, inputs="probs", n_bins=5, norm="l2")) == pytest.approx(
        expected
    )
    assert float(M.ece(PROBS, LABELS, inputs="probs", n_bins=5, closure="left")) == pytest.approx(
        EXPECTED["ece"]
    )


def test_edge_closure_decides_the_bin_of_a_confidence_on_an_edge():
    # confidences .5 (tie -> class 0, correct) and .6 (wrong), 4 bins; .5 is an edge
    probs = torch.tensor([[0.5, 0.5], [0.4, 0.6]], dtype=torch.float64)
    labels = torch.tensor([0, 0])
    right = M.reliability_bins(probs, labels, n_bins=4, inputs="probs", closure="right")
    left = M.reliability_bins(probs, labels, n_bins=4, inputs="probs", closure="left")
    assert right["counts"].tolist() == [0, 1, 1, 0]  # (.25,.5] and (.5,.75]
    assert left["counts"].tolist() == [0, 0, 2, 0]  # [.5,.75) holds both
    assert float(M.ece(probs, labels, inputs="probs", n_bins=4, closure="right")) == pytest.approx(
        0.55
    )
    assert float(M.ece(probs, labels, inputs="probs", n_bins=4, closure="left")) == pytest.approx(
        0.05
    )


def test_confidence_one_goes_to_the_last_bin_under_both_closures():
    probs = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    for closure in ("left", "right"):
        bins = M.reliability_bins(probs, [0, 0], n_bins=10, inputs="probs", closure=closure)
        assert bins["counts"][-1] == 2


def test_debiased_ece_l2_toys():
    # one bin, three wrong predictions at confidence .95: (0 - .95)^2 - 0 -> .95
    probs = torch.tensor([[0.95, 0.05]] * 3, dtype=torch.float64)
    assert float(M.debiased_ece_l2(probs, [1, 1, 1], inputs="probs", n_bins=1)) == pytest.approx(
        0.95
    )
    # four samples at .8, two correct: (.5 - .8)^2 - .5*.5/3
    probs = torch.tensor([[0.8, 0.2]] * 4, dtype=torch.float64)
    value = M.debiased_ece_l2(probs, [0, 0, 1, 1], inputs="probs", n_bins=1)
    assert float(value) == pytest.approx(math.sqrt(0.09 - 0.25 / 3))


def test_first_maximal_class_is_the_prediction_on_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    assert float(M.accuracy(logits, [1, 0])) == 1.0
    assert float(M.accuracy(logits, [2, 1])) == 0.0


def test_auroc_ties_count_one_half_and_undefined_cases_are_nan():
    probs = torch.tensor([[0.8, 0.2], [0.8, 0.2], [0.6, 0.4]], dtype=torch.float64)
    # correct {.8}, wrong {.8, .6}: tie 1/2 + win 1 over 2 pairs
    assert float(M.auroc(probs, [0, 1, 1], inputs="probs")) == pytest.approx(0.75)
    assert math.isnan(float(M.auroc(probs, [0, 0, 0], inputs="probs")))
    assert float(M.decomp_beta(probs, [0, 0, 0], inputs="probs")) == 0.0
    assert float(M.decomp_gamma(probs, [0, 0, 0], inputs="probs")) == 0.5


def test_constant_confidence_toys_for_the_kernel_and_soft_estimators():
    # every sample: confidence .8 and correct -> every estimator sees |1 - .8| = .2
    probs = torch.tensor([[0.8, 0.2]] * 50, dtype=torch.float64)
    labels = torch.zeros(50, dtype=torch.long)
    assert float(M.sece(probs, labels, inputs="probs")) == pytest.approx(0.2, abs=1e-12)
    assert float(M.dece(probs, labels, inputs="probs")) == pytest.approx(0.2, abs=1e-12)
    assert float(M.sb_ece(probs, labels, inputs="probs")) == pytest.approx(0.2, abs=1e-12)
    assert float(M.sb_ece(probs, labels, inputs="probs", label_binned=True, p=1)) == pytest.approx(
        0.2, abs=1e-12
    )
    # smooth ECE: kernel regression of the constant residual -.2; 1e-4 density floor (relplot)
    assert float(M.smooth_ece(probs, labels, inputs="probs")) == pytest.approx(0.2, abs=1e-5)


def test_sece_with_narrow_kernel_separates_distant_confidence_groups():
    # group at .9 (3 of 4 correct), group at .6 (1 of 4 correct), h = .01 -> kernel across groups ~0
    probs = torch.tensor([[0.9, 0.1]] * 4 + [[0.6, 0.4]] * 4, dtype=torch.float64)
    labels = torch.tensor([0, 0, 0, 1, 0, 1, 1, 1])
    expected = (abs(0.75 - 0.9) + abs(0.25 - 0.6)) / 2
    assert float(M.sece(probs, labels, inputs="probs", bandwidth=0.01)) == pytest.approx(
        expected, abs=1e-9
    )


def test_sb_ece_tends_to_hard_equal_width_binning_as_temperature_vanishes():
    hard = M.ece(PROBS, LABELS, inputs="probs", n_bins=5, norm="l2")
    soft = M.sb_ece(PROBS, LABELS, inputs="probs", n_bins=5, temperature=1e-5)
    assert float(soft) == pytest.approx(float(hard), abs=1e-9)
    hard_lb = M.ece_lb(PROBS, LABELS, inputs="probs", n_bins=5, scheme="width")
    soft_lb = M.sb_ece(PROBS, LABELS, inputs="probs", n_bins=5, temperature=1e-5, label_binned=True)
    assert float(soft_lb) == pytest.approx(float(hard_lb), abs=1e-9)


def test_dece_tends_to_hard_ece_with_sharp_bins_and_accuracy():
    # tau_b -> 0 gives the equal-width bins, large tau_a the hard accuracy (K = 2, gaps >= .1)
    value = M.dece(PROBS, LABELS, inputs="probs", n_bins=5, tau_a=1e4, tau_b=1e-5)
    assert float(value) == pytest.approx(EXPECTED["ece"], abs=1e-5)

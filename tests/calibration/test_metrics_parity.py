"""Parity with torchmetrics, netcal, relplot and scikit-learn where the definitions coincide,
and tests of the documented differences where they do not (docs/metrics.md, "Relation to
other libraries")."""

import warnings

import numpy as np
import pytest
import torch

from calib_pipeline.calibration import metrics as M

torchmetrics_cal = pytest.importorskip("torchmetrics.functional.classification")
netcal_metrics = pytest.importorskip("netcal.metrics")
relplot = pytest.importorskip("relplot")
sk_metrics = pytest.importorskip("sklearn.metrics")

TOL = 1e-6


def _generator(seed):
    return torch.Generator().manual_seed(seed)


def _probs(n, k, seed, scale=2.0, dtype=torch.float64):
    return torch.softmax(
        torch.randn(n, k, generator=_generator(seed), dtype=torch.float64) * scale, -1
    ).to(dtype)


def _labels(n, k, seed):
    return torch.randint(0, k, (n,), generator=_generator(seed + 1))


def _case(name):
    """Probabilities (float64 unless stated) and labels for one random or adversarial case."""
    if name == "random":
        return _probs(2000, 10, 0), _labels(2000, 10, 0)
    if name == "tied":  # 8 distinct rows repeated: many tied confidences
        probs = _probs(8, 10, 1).repeat(125, 1)
        return probs, _labels(1000, 10, 1)
    if name == "fp16":  # fp16-quantised probabilities: few distinct confidence values
        probs = _probs(2000, 10, 2, scale=2.0).half().float()
        return probs, _labels(2000, 10, 2)
    if name == "class_absent":
        return _probs(1500, 10, 3), _labels(1500, 9, 3)
    if name == "k2":
        return _probs(1000, 2, 4), _labels(1000, 2, 4)
    if name == "k1000":
        return _probs(300, 1000, 5, scale=4.0), _labels(300, 1000, 5)
    if name == "n1":
        return _probs(1, 10, 6), torch.tensor([3])
    probs = _probs(500, 10, 7)
    if name == "all_correct":
        return probs, probs.argmax(1)
    if name == "all_wrong":
        return probs, (probs.argmax(1) + 1) % 10
    raise KeyError(name)


CASES = ["random", "tied", "fp16", "class_absent", "k2", "k1000", "n1", "all_correct", "all_wrong"]


# --------------------------------------------------------------------------- torchmetrics


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_ece_matches_torchmetrics_with_left_closure(case, norm):
    probs, labels = _case(case)
    assert float(probs.max()) < 1.0  # confidence 1.0 is the documented difference below
    ours = M.ece(probs, labels, inputs="probs", n_bins=15, norm=norm, closure="left")
    theirs = torchmetrics_cal.multiclass_calibration_error(
        probs, labels, num_classes=probs.shape[1], n_bins=15, norm=norm
    )
    assert float(ours) == pytest.approx(float(theirs), abs=TOL)


def test_ece_matches_torchmetrics_on_float64_logits_with_many_bins():
    logits = torch.randn(3000, 100, generator=_generator(10), dtype=torch.float64) * 3
    labels = _labels(3000, 100, 10)
    for n_bins in (10, 100, 1000):
        ours = M.ece(logits, labels, n_bins=n_bins, closure="left")
        theirs = torchmetrics_cal.multiclass_calibration_error(
            logits, labels, num_classes=100, n_bins=n_bins
        )
        assert float(ours) == pytest.approx(float(theirs), abs=TOL)


def test_confidence_one_differs_from_torchmetrics_hidden_extra_bin():
    """torchmetrics puts confidence == 1.0 into an extra bin (its issue #3510); we keep it in
    the last bin. Its value equals ours computed with the saturated samples binned apart."""
    probs, labels = _case("random")
    saturated = torch.zeros(200, 10, dtype=torch.float64)
    saturated[:, 0] = 1.0
    # underconfident samples in the last bin make its merged gap differ in l1 as well
    underconfident = torch.full((2000, 10), 0.04 / 9, dtype=torch.float64)
    underconfident[:, 0] = 0.96
    probs = torch.cat([probs, saturated, underconfident])
    labels = torch.cat(
        [labels, torch.tensor([0] * 150 + [1] * 50), torch.zeros(2000, dtype=torch.long)]
    )
    n, ones = probs.shape[0], probs.amax(1) == 1.0
    for norm in ("l1", "l2"):
        theirs = float(
            torchmetrics_cal.multiclass_calibration_error(
                probs, labels, num_classes=10, n_bins=15, norm=norm
            )
        )
        ours = float(M.ece(probs, labels, inputs="probs", norm=norm, closure="left"))
        rest = float(M.ece(probs[~ones], labels[~ones], inputs="probs", norm=norm, closure="left"))
        weight, gap = (
            200 / n,
            1.0 - 0.75,
        )  # the extra bin: 200 samples at confidence 1, accuracy .75
        expected = (
            (1 - weight) * rest + weight * gap
            if norm == "l1"
            else ((1 - weight) * rest**2 + weight * gap**2) ** 0.5
        )
        # torchmetrics sums 2,000 equal float32 confidences in float32: ~1e-5 rounding
        assert theirs == pytest.approx(expected, abs=1e-4)
        assert abs(ours - theirs) > 1e-3


@pytest.mark.parametrize("case", ["random", "tied", "class_absent", "k1000", "all_wrong"])
def test_debiased_l2_matches_torchmetrics_internal_debiased_estimator(case):
    """torchmetrics 1.9 has Kumar et al.'s debiased l2 only in its internal _ce_compute; it
    keeps the plug-in term of single-sample bins, which Kumar's estimator (and ours) drops."""
    from torchmetrics.functional.classification.calibration_error import _ce_compute

    probs, labels = _case(case)
    confidence, correct = _top_label(probs, labels)
    theirs = float(
        _ce_compute(
            torch.from_numpy(confidence), torch.from_numpy(correct), 15, norm="l2", debias=True
        )
    )
    ours = float(M.debiased_ece_l2(probs, labels, inputs="probs", scheme="width", closure="left"))
    bins = M.reliability_bins(probs, labels, inputs="probs", closure="left")
    single = bins["counts"] == 1
    singles = np.sum((bins["accuracy"][single] - bins["confidence"][single]) ** 2) / len(labels)
    assert theirs**2 == pytest.approx(ours**2 + singles, abs=TOL)
    if case == "all_wrong":
        assert single.any() and abs(theirs - ours) > 1e-5


# --------------------------------------------------------------------------- netcal


def _netcal(metric, probs, labels, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(metric(**kwargs).measure(probs.numpy(), labels.numpy()))


@pytest.mark.parametrize("case", ["random", "tied", "fp16", "class_absent", "k1000", "all_wrong"])
def test_ece_and_mce_match_netcal_with_left_closure(case):
    probs, labels = _case(case)
    if len(np.unique(labels.numpy())) <= 2:
        pytest.skip("netcal switches to positive-class calibration for <= 2 distinct labels")
    assert float(M.ece(probs, labels, inputs="probs", closure="left")) == pytest.approx(
        _netcal(netcal_metrics.ECE, probs, labels, bins=15), abs=TOL
    )
    assert float(M.mce(probs, labels, inputs="probs", closure="left")) == pytest.approx(
        _netcal(netcal_metrics.MCE, probs, labels, bins=15), abs=TOL
    )


@pytest.mark.parametrize("n_samples", [1501, 2986])  # N = 1 (mod 15): both quantile rules agree
def test_equal_mass_ece_matches_netcal_when_sample_count_is_one_mod_bins(n_samples):
    probs, labels = _probs(n_samples, 10, 11), _labels(n_samples, 10, 11)
    ours = M.ece_em(probs, labels, inputs="probs", closure="left")
    theirs = _netcal(netcal_metrics.ECE, probs, labels, bins=15, equal_intervals=False)
    assert float(ours) == pytest.approx(theirs, abs=TOL)


def test_equal_mass_edges_differ_from_netcal_quantiles_otherwise():
    """netcal's np.quantile edges put ceil((N-1) j/M) samples below edge j, ours floor(j N/M)."""
    probs, labels = _probs(100, 10, 12), _labels(100, 10, 12)
    ours = M.reliability_bins(probs, labels, inputs="probs", scheme="mass", closure="left")[
        "counts"
    ]
    below = np.cumsum(ours)[:-1]
    assert below.tolist() == [j * 100 // 15 for j in range(1, 15)]
    quantile_rule = [int(np.ceil(99 * j / 15)) for j in range(1, 15)]
    assert below.tolist() != quantile_rule


def test_binary_problems_are_top_label_here_but_positive_class_in_netcal():
    probs, labels = _case("k2")
    theirs = _netcal(netcal_metrics.ECE, probs, labels, bins=15)
    # netcal's value is the ECE of p(class 1) against 1[y = 1]:
    positive = probs[:, 1].numpy()
    bins = np.minimum((positive * 15).astype(int), 14)
    hits = (labels.numpy() == 1).astype(float)
    gap = sum(abs(hits[bins == b].sum() - positive[bins == b].sum()) for b in range(15)) / len(bins)
    assert theirs == pytest.approx(gap, abs=TOL)
    assert abs(float(M.ece(probs, labels, inputs="probs", closure="left")) - theirs) > 1e-3


# --------------------------------------------------------------------------- relplot


def _top_label(probs, labels):
    probs = probs.to(torch.float64).numpy()
    return probs.max(1), (probs.argmax(1) == labels.numpy()).astype(float)


@pytest.mark.parametrize(
    "case",
    ["random", "tied", "fp16", "class_absent", "k2", "k1000", "n1", "all_correct", "all_wrong"],
)
def test_smooth_ece_matches_relplot(case):
    probs, labels = _case(case)
    confidence, correct = _top_label(probs, labels)
    assert float(M.smooth_ece(probs, labels, inputs="probs")) == pytest.approx(
        relplot.smECE(confidence, correct), abs=TOL
    )


@pytest.mark.parametrize("bandwidth", [0.003, 0.05, 0.3])
def test_fixed_bandwidth_smooth_ece_matches_relplot(bandwidth):
    probs, labels = _case("random")
    confidence, correct = _top_label(probs, labels)
    ours = M.smooth_ece(probs, labels, inputs="probs", bandwidth=bandwidth)
    assert float(ours) == pytest.approx(
        relplot.smECE_sigma(confidence, correct, bandwidth), abs=TOL
    )


# --------------------------------------------------------------------------- scikit-learn


@pytest.mark.parametrize("case", CASES)
def test_auroc_nll_brier_match_scikit_learn(case):
    probs, labels = _case(case)
    confidence, correct = _top_label(probs, labels)
    k = probs.shape[1]
    if 0 < correct.sum() < len(correct):
        assert float(M.auroc(probs, labels, inputs="probs")) == pytest.approx(
            sk_metrics.roc_auc_score(correct, confidence), abs=TOL
        )
    else:
        assert np.isnan(float(M.auroc(probs, labels, inputs="probs")))
    if (
        probs.dtype == torch.float64
    ):  # sklearn renormalises rows, float32 fp16-rounded rows are off by ~1e-4
        assert float(M.nll(probs, labels, inputs="probs")) == pytest.approx(
            sk_metrics.log_loss(labels.numpy(), probs.numpy(), labels=list(range(k))), abs=TOL
        )
        assert float(M.brier(probs, labels, inputs="probs")) == pytest.approx(
            sk_metrics.brier_score_loss(
                labels.numpy(), probs.numpy(), labels=list(range(k)), scale_by_half=False
            ),
            abs=TOL,
        )

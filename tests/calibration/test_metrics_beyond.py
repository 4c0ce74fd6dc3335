"""KS error, AURC, AUGRC, SKCE (with its test) and ECE-KDE: values computed independently
here (loops over pairs, lgamma densities, the bootstrap written out), tie and edge
conventions, blocking, and failure paths (docs/metrics.md, "Beyond the five papers")."""

import itertools
import math
import re

import numpy as np
import pytest
import torch

from calib_pipeline.calibration import _metrics_kernel_ce as kernel_ce
from calib_pipeline.calibration import metrics as M


def _random_probs(n, k, seed, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(n, k, generator=g, dtype=torch.float64) * scale, -1)
    return probs, torch.randint(0, k, (n,), generator=g)


def _sampled_labels(probs, seed):
    """Labels drawn from the predictions themselves: a calibrated model."""
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(probs, 1, generator=g).squeeze(1)


# --------------------------------------------------------------------------- KS, AURC, AUGRC


def _ks_by_thresholds(confidence, correct):
    """max over thresholds s of abs(sum_{c <= s} (c - correct)) / N, from its definition."""
    gaps = [
        sum(c - a for c, a in zip(confidence, correct, strict=True) if c <= s)
        for s in set(confidence)
    ]
    return max(abs(gap) for gap in gaps) / len(confidence)


def _area_by_thresholds(confidence, correct, selective):
    """The risk-coverage points at every distinct threshold, then trapezoids."""
    n = len(confidence)
    points = []
    for s in sorted(set(confidence), reverse=True):
        accepted = [a for c, a in zip(confidence, correct, strict=True) if c >= s]
        errors = len(accepted) - sum(accepted)
        points.append((len(accepted) / n, errors / (len(accepted) if selective else n)))
    points.insert(0, (0.0, points[0][1] if selective else 0.0))
    return sum((c1 - c0) * (r0 + r1) / 2 for (c0, r0), (c1, r1) in itertools.pairwise(points))


def test_ks_aurc_augrc_against_their_definitions_with_ties():
    probs, labels = _random_probs(300, 5, seed=0)
    probs = (probs * 20).round() / 20  # few distinct confidences: many ties
    probs = probs / probs.sum(-1, keepdim=True)
    confidence = probs.max(-1).values.tolist()
    correct = (probs.argmax(-1) == labels).double().tolist()
    assert float(M.ks_error(probs, labels, inputs="probs")) == pytest.approx(
        _ks_by_thresholds(confidence, correct), abs=1e-12
    )
    for key, selective in (("aurc", True), ("augrc", False)):
        expected = _area_by_thresholds(confidence, correct, selective)
        assert float(getattr(M, key)(probs, labels, inputs="probs")) == pytest.approx(
            expected, abs=1e-12
        )


def test_tied_confidences_do_not_depend_on_the_sample_order():
    probs, labels = _random_probs(400, 4, seed=1)
    probs = (probs * 10).round() / 10
    probs = probs / probs.sum(-1, keepdim=True)
    order = torch.randperm(400, generator=torch.Generator().manual_seed(2))
    for key in ("ks_error", "aurc", "augrc"):
        before = float(getattr(M, key)(probs, labels, inputs="probs"))
        after = float(getattr(M, key)(probs[order], labels[order], inputs="probs"))
        assert before == after, key


def test_augrc_of_a_tie_is_the_mean_over_its_orders():
    # a correct and a wrong sample tie at .7; breaking the tie either way by 1e-9
    # moves the curve's middle point; the tie's curve is the mean of the two
    def augrc(c_correct, c_wrong):
        probs = torch.tensor([[0.9, 0.1], [c_correct, 1 - c_correct], [c_wrong, 1 - c_wrong]])
        return float(M.augrc(probs.double(), [0, 0, 1], inputs="probs"))

    broken = (augrc(0.7 + 1e-9, 0.7) + augrc(0.7, 0.7 + 1e-9)) / 2
    assert augrc(0.7, 0.7) == pytest.approx(broken, abs=1e-8)


def test_confidences_of_exactly_one_and_all_correct_or_wrong():
    probs = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    right = torch.tensor([0, 0, 1, 0])
    assert float(M.aurc(probs, right, inputs="probs")) == 0.0
    assert float(M.augrc(probs, right, inputs="probs")) == 0.0
    # the three at 1.0 are accepted together: gap 0 there, then -(.5 - 1) at .5
    assert float(M.ks_error(probs, right, inputs="probs")) == pytest.approx(0.5 / 4)
    wrong = torch.tensor([1, 1, 0, 1])
    assert float(M.aurc(probs, wrong, inputs="probs")) == pytest.approx(1.0)
    assert float(M.augrc(probs, wrong, inputs="probs")) == pytest.approx(0.5)  # area of c
    assert float(M.ks_error(probs, wrong, inputs="probs")) == pytest.approx(3.5 / 4)


def test_batched_runs_score_as_single_runs():
    runs = [_random_probs(200, 6, seed=s) for s in range(3)]
    logits = torch.stack([p.log() for p, _ in runs])
    labels = torch.stack([y for _, y in runs])
    keys = ["ks_error", "aurc", "augrc"]
    batched = M.calibration_metrics_batched(logits, labels, keys=keys)
    for r, (probs, y) in enumerate(runs):
        single = M.calibration_metrics(probs.log(), y, keys=keys)
        for key in keys:
            assert batched[key][r] == pytest.approx(single[key], abs=1e-12)


# --------------------------------------------------------------------------- SKCE


def _skce_loops(probs, labels, bandwidth, kernel="laplacian"):
    """SKCE_uq and the matrix h, by a loop over pairs (Widmann et al. 2019)."""
    n, k = probs.shape
    residual = np.eye(k)[labels] - probs
    h = np.empty((n, n))
    for i, j in itertools.product(range(n), range(n)):
        distance = np.linalg.norm(probs[i] - probs[j])
        if kernel == "laplacian":
            weight = math.exp(-distance / bandwidth)
        else:
            weight = math.exp(-(distance**2) / (2 * bandwidth**2))
        h[i, j] = weight * residual[i] @ residual[j]
    upper = sum(h[i, j] for i in range(n) for j in range(i + 1, n))
    return 2 * upper / (n * (n - 1)), h


def test_skce_hand_computed_two_samples():
    # residuals (.2, -.2) and (.4, -.4): inner product .16; the one distance
    # sqrt(.08) is the median, so the kernel is e^-1 (Laplacian) or e^-1/2 (Gaussian)
    probs = torch.tensor([[0.8, 0.2], [0.6, 0.4]], dtype=torch.float64)
    labels = [0, 0]
    assert float(M.skce(probs, labels, inputs="probs")) == pytest.approx(0.16 * math.exp(-1))
    assert float(M.skce(probs, labels, inputs="probs", kernel="gaussian")) == pytest.approx(
        0.16 * math.exp(-0.5)
    )
    assert float(M.skce(probs, labels, inputs="probs", estimator="linear")) == pytest.approx(
        0.16 * math.exp(-1)
    )


@pytest.mark.parametrize("kernel", ["laplacian", "gaussian"])
def test_skce_estimators_against_loops_over_pairs(kernel):
    probs, labels = _random_probs(41, 4, seed=3)
    p, y = probs.numpy(), labels.numpy()
    distances = [np.linalg.norm(p[i] - p[j]) for i in range(41) for j in range(i + 1, 41)]
    bandwidth = float(np.median(distances))
    quadratic, h = _skce_loops(p, y, bandwidth, kernel)
    linear = np.mean([h[2 * i, 2 * i + 1] for i in range(20)])
    assert float(M.skce(probs, labels, inputs="probs", kernel=kernel)) == pytest.approx(
        quadratic, abs=1e-14
    )
    value = M.skce(probs, labels, inputs="probs", kernel=kernel, estimator="linear")
    assert float(value) == pytest.approx(linear, abs=1e-14)
    fixed = M.skce(probs, labels, inputs="probs", kernel=kernel, bandwidth=0.3)
    assert float(fixed) == pytest.approx(_skce_loops(p, y, 0.3, kernel)[0], abs=1e-14)


@pytest.mark.parametrize("n", [2, 3, 50, 51])
def test_median_heuristic_is_the_median_of_the_pairwise_distances(n):
    probs, _ = _random_probs(n, 3, seed=n)
    probs[: n // 3] = probs[0]  # repeated rows: many distances exactly 0
    p = probs.numpy()
    distances = [np.linalg.norm(p[i] - p[j]) for i in range(n) for j in range(i + 1, n)]
    assert kernel_ce.median_distance(probs) == pytest.approx(np.median(distances), abs=1e-9)


def test_skce_is_the_same_in_small_blocks(monkeypatch):
    probs, labels = _random_probs(300, 5, seed=4)
    keys = ["skce", "skce_p_value", "ece_kde", "ece_kde_top"]
    whole = M.calibration_metrics(probs, labels, inputs="probs", keys=keys, n_resamples=50)
    monkeypatch.setattr(kernel_ce, "_BLOCK_ELEMENTS", 7 * 300)
    blocked = M.calibration_metrics(probs, labels, inputs="probs", keys=keys, n_resamples=50)
    assert blocked == pytest.approx(whole, rel=1e-10, abs=1e-14)


def test_skce_p_value_is_the_written_out_bootstrap_of_the_same_draws():
    probs, labels = _random_probs(40, 3, seed=5)
    p, y = probs.numpy(), labels.numpy()
    distances = [np.linalg.norm(p[i] - p[j]) for i in range(40) for j in range(i + 1, 40)]
    skce_uq, h = _skce_loops(p, y, float(np.median(distances)))
    n, resamples, total = 40, 30, h.sum()
    draws = torch.randint(n, (resamples, n), generator=torch.Generator().manual_seed(7))
    statistics = []
    for draw in draws.numpy():
        row = h[draw].sum(1)  # sum_r h(Z*_i, Z_r)
        t = sum(
            h[draw[i], draw[j]] - row[i] / n - row[j] / n + total / n**2
            for i in range(n)
            for j in range(i + 1, n)
        )
        statistics.append(2 * t / n)
    expected = np.mean(np.array(statistics) >= n * skce_uq)
    value = M.skce_p_value(probs, labels, inputs="probs", n_resamples=resamples, seed=7)
    assert float(value) == pytest.approx(expected, abs=1e-12)


def test_skce_test_rejects_a_miscalibrated_model_and_not_a_calibrated_one():
    probs, _ = _random_probs(400, 3, seed=6)
    calibrated = _sampled_labels(probs, seed=8)
    swapped = _sampled_labels(probs.flip(-1), seed=8)  # labels from the reversed prediction
    p_calibrated = float(M.skce_p_value(probs, calibrated, inputs="probs", n_resamples=300))
    p_swapped = float(M.skce_p_value(probs, swapped, inputs="probs", n_resamples=300))
    assert p_calibrated > 0.05 and p_swapped == 0.0


def test_skce_single_sample_is_nan_and_identical_predictions_need_a_bandwidth():
    probs = torch.tensor([[0.7, 0.3]], dtype=torch.float64)
    assert math.isnan(float(M.skce(probs, [0], inputs="probs")))
    assert math.isnan(float(M.skce_p_value(probs, [0], inputs="probs")))
    same = torch.tensor([[0.7, 0.3]] * 4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"median heuristic gives .* pass bandwidth="):
        M.skce(same, [0, 1, 0, 0], inputs="probs")
    # with a bandwidth, every kernel value is 1: the mean residual inner product of pairs
    value = float(M.skce(same, [0, 1, 0, 0], inputs="probs", bandwidth=0.1))
    _, h = _skce_loops(same.numpy(), np.array([0, 1, 0, 0]), 0.1)
    assert value == pytest.approx((h.sum() - np.trace(h)) / 12)


# --------------------------------------------------------------------------- ECE-KDE


def _log_dirichlet(z, alpha):
    """log Dir(z; alpha) with 0 log 0 = 0, by lgamma (independent of the module)."""
    log_norm = math.lgamma(sum(alpha)) - sum(math.lgamma(a) for a in alpha)
    terms = [
        0.0 if a == 1 else -math.inf if v == 0 else (a - 1) * math.log(v)
        for v, a in zip(z, alpha, strict=True)
    ]
    return log_norm + sum(terms)


def _log_sum_exp(values):
    peak = max(values)
    return peak + math.log(sum(math.exp(v - peak) for v in values))


def _ece_kde_loops(points, targets, bandwidth, p):
    """(1/N) sum_i sum_k |r_ik - z_ik|^p, r_i the leave-one-out Dirichlet kernel regression
    (the first len(targets[0]) columns of z)."""
    n = len(points)
    total = 0.0
    for i in range(n):
        weights = [
            0.0 if j == i else math.exp(_log_dirichlet(points[i], [v / bandwidth + 1 for v in z]))
            for j, z in enumerate(points)
        ]
        mass = sum(weights)  # 0 where every other kernel vanishes at z_i: r_i = 0
        ratio = [
            sum(w * t[k] for w, t in zip(weights, targets, strict=True)) / mass if mass else 0.0
            for k in range(len(targets[0]))
        ]
        total += sum(abs(r - points[i][k]) ** p for k, r in enumerate(ratio))
    return total / n


def test_ece_kde_hand_computed_two_samples():
    # with two samples each one's leave-one-out regression is the other's label
    probs = torch.tensor([[0.8, 0.2], [0.6, 0.4]], dtype=torch.float64)
    labels = [0, 1]
    # r_1 = (0, 1): .8 + .8; r_2 = (1, 0): .4 + .4
    assert float(M.ece_kde(probs, labels, inputs="probs", bandwidth=0.1)) == pytest.approx(1.2)
    assert float(M.ece_kde(probs, labels, inputs="probs", bandwidth=0.1, p=2)) == pytest.approx(
        math.sqrt((0.64 + 0.64 + 0.16 + 0.16) / 2)
    )
    # top-label: c = .8 (correct), .6 (wrong): r_1 = 0, r_2 = 1
    assert float(M.ece_kde_top(probs, labels, inputs="probs", bandwidth=0.1)) == pytest.approx(
        (0.8 + 0.4) / 2
    )


@pytest.mark.parametrize("p", [1.0, 2.0])
def test_ece_kde_against_lgamma_densities(p):
    probs, labels = _random_probs(25, 3, seed=9, scale=1.0)
    points = probs.tolist()
    onehot = np.eye(3)[labels.numpy()].tolist()
    expected = _ece_kde_loops(points, onehot, 0.2, p) ** (1 / p)
    value = M.ece_kde(probs, labels, inputs="probs", bandwidth=0.2, p=p)
    assert float(value) == pytest.approx(expected, rel=1e-10)
    confidence = probs.max(-1).values.tolist()
    top_points = [[c, 1 - c] for c in confidence]
    correct = [[float(a)] for a in (probs.argmax(-1) == labels).tolist()]
    top = _ece_kde_loops(top_points, correct, 0.2, p) ** (1 / p)
    value = M.ece_kde_top(probs, labels, inputs="probs", bandwidth=0.2, p=p)
    assert float(value) == pytest.approx(top, rel=1e-10)


def test_ece_kde_bandwidth_maximises_the_leave_one_out_likelihood():
    probs, labels = _random_probs(30, 3, seed=10)
    points = probs.tolist()

    def likelihood(h):
        total = 0.0
        for i, z in enumerate(points):
            log_densities = [
                _log_dirichlet(z, [v / h + 1 for v in other])
                for j, other in enumerate(points)
                if j != i
            ]
            total += _log_sum_exp(log_densities) - math.log((len(points) - 1) * h)
        return total

    best = max(kernel_ce.KDE_BANDWIDTHS, key=likelihood)
    assert kernel_ce.kde_bandwidth(probs) == best
    automatic = float(M.ece_kde(probs, labels, inputs="probs"))
    assert automatic == float(M.ece_kde(probs, labels, inputs="probs", bandwidth=best))


def test_ece_kde_with_probabilities_of_exactly_zero_and_one():
    # saturated rows: 0 log 0 = 0 in the kernel, so nothing is NaN
    probs = torch.tensor(
        [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]],
        dtype=torch.float64,
    )
    labels = [0, 1, 1, 2, 2]
    for key in ("ece_kde", "ece_kde_top"):
        automatic = float(getattr(M, key)(probs, labels, inputs="probs"))
        fixed = float(getattr(M, key)(probs, labels, inputs="probs", bandwidth=0.5))
        assert math.isfinite(automatic) and math.isfinite(fixed), key
    expected = _ece_kde_loops(probs.tolist(), np.eye(3)[labels].tolist(), 0.5, 1.0)
    assert float(M.ece_kde(probs, labels, inputs="probs", bandwidth=0.5)) == pytest.approx(expected)


def test_ece_kde_of_a_single_sample_is_nan():
    probs = torch.tensor([[0.7, 0.3]], dtype=torch.float64)
    assert math.isnan(float(M.ece_kde(probs, [0], inputs="probs", bandwidth=0.1)))


# --------------------------------------------------------------------------- registry


def test_kernel_metrics_are_on_request_and_any_input_kind_works():
    probs, labels = _random_probs(60, 4, seed=11)
    default = M.calibration_metrics(probs.log(), labels)
    assert {"ks_error", "aurc", "augrc"} <= set(default)
    assert not set(M.ON_REQUEST) & set(default)
    keys = ["skce", "ece_kde"]
    from_numpy = M.calibration_metrics(probs.log().numpy(), labels.numpy(), keys=keys)
    from_probs = M.calibration_metrics(probs, labels, inputs="probs", keys=keys)
    assert from_numpy == pytest.approx(from_probs, rel=1e-9)


@pytest.mark.parametrize(
    ("key", "options", "shown"),
    [
        ("skce", {"kernel": "rbf"}, "'rbf'"),
        ("skce", {"estimator": "cubic"}, "'cubic'"),
        ("skce", {"bandwidth": 0.0}, "0.0"),
        ("skce_p_value", {"n_resamples": 0}, "0"),
        ("skce_p_value", {"seed": -1}, "-1"),
        ("ece_kde", {"p": -1.0}, "-1.0"),
        ("ece_kde_top", {"bandwidth": "auto"}, "'auto'"),
        ("aurc", {"n_bins": 10}, "n_bins"),
    ],
)
def test_bad_options_are_refused_quoting_the_value(key, options, shown):
    with pytest.raises(ValueError, match=re.escape(shown)):
        M.build_metric(key, **options)


def test_reports_know_the_new_metrics():
    for key in ("ks_error", "aurc", "augrc", "skce", "skce_p_value", "ece_kde", "ece_kde_top"):
        assert key in M.METRIC_UNITS and key in M.METRIC_NAMES and key in M.METRIC_DIRECTIONS
    assert M.METRIC_DIRECTIONS["skce_p_value"] is None


def test_every_available_device_gives_the_cpu_values_of_the_new_keys():
    # the CPU always; CUDA too where a GPU is present (no skipped test on CPU machines)
    probs, labels = _random_probs(120, 5, seed=12)
    keys = ["ks_error", "aurc", "augrc", "skce", "skce_p_value", "ece_kde", "ece_kde_top"]
    cpu = M.calibration_metrics(probs.log(), labels, keys=keys, n_resamples=40)
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        logits = probs.log().to(device)
        values = M.calibration_metrics(logits, labels.to(device), keys=keys, n_resamples=40)
        assert values == pytest.approx(cpu, rel=1e-5, abs=1e-7), device


def test_bootstrap_intervals_of_the_selective_metrics():
    probs, labels = _random_probs(300, 4, seed=13)
    interval = M.bootstrap_ci(probs, labels, "augrc", n_resamples=200, inputs="probs")
    assert interval["point"] == float(M.augrc(probs, labels, inputs="probs"))
    assert interval["low"] < interval["point"] < interval["high"]

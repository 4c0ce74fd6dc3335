"""Training objectives: hand-computed values, limits, gradients, soft targets, validation."""

from __future__ import annotations

import math
import pickle

import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from calib_pipeline.calibration import metrics
from calib_pipeline.calibration.losses import (
    MixupObjective,
    build_objective,
    focal_loss,
    objective_names,
)

# Three samples whose probabilities are exact: logits = log p.
PROBS = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.1, 0.6, 0.3]], dtype=torch.float64)
LOGITS = PROBS.log()
LABELS = torch.tensor([0, 2, 0])
P_T = [0.5, 0.3, 0.1]  # target-class probabilities of the three samples

PRIMARIES = ["nll", {"name": "focal", "gamma": 1.0}, "mse", "label_smoothing"]
SECONDARIES = [
    "none",
    "mmce",
    "avuc",
    "avuc_gs",
    {"name": "soft_avuc", "temperature": 0.5},
    "sb_ece",
    "mdca",
]


def _term_name(spec) -> str:
    return spec if isinstance(spec, str) else spec["name"]


EVERY_CONFIGURATION = [pytest.param(name, {}, id=name) for name in objective_names()] + [
    pytest.param(
        "composite",
        {"primary": p, "secondary": s, "beta": 0.5},
        id=f"composite-{_term_name(p)}-{_term_name(s)}",
    )
    for p in PRIMARIES
    for s in SECONDARIES
]


def _batch(n: int = 64, k: int = 10, scale: float = 3.0, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(n, k, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, k, (n,), generator=generator)
    return logits, labels


def _mean(values):
    return sum(values) / len(values)


def _value(name: str, **hyperparameters) -> float:
    return build_objective(name, **hyperparameters)(LOGITS, LABELS).item()


# --- hand-computed values --------------------------------------------------------------


def test_elementwise_losses_match_hand_computed_values():
    nll = [-math.log(p) for p in P_T]
    assert _value("cross_entropy") == pytest.approx(_mean(nll))
    assert _value("focal", gamma=2) == pytest.approx(
        _mean([(1 - p) ** 2 * -math.log(p) for p in P_T])
    )
    # FLSD-53: gamma 3 for p_t = 0.5, 0.3 and gamma 5 for p_t = 0.1 < 0.2.
    assert _value("flsd53") == pytest.approx(
        _mean([(1 - p) ** g * -math.log(p) for p, g in zip(P_T, [3, 3, 5])])
    )
    assert _value("inverse_focal", gamma=2) == pytest.approx(
        _mean([(1 + p) ** 2 * -math.log(p) for p in P_T])
    )
    mean_log = [sum(math.log(q) for q in row) / 3 for row in PROBS.tolist()]
    assert _value("label_smoothing", epsilon=0.1) == pytest.approx(
        _mean([0.9 * a - 0.1 * b for a, b in zip(nll, mean_log)])
    )
    entropy = [-sum(q * math.log(q) for q in row) for row in PROBS.tolist()]
    assert _value("entropy_regularized", beta=0.3) == pytest.approx(
        _mean([a - 0.3 * h for a, h in zip(nll, entropy)])
    )
    l1 = [sum(abs(math.log(q)) for q in row) for row in PROBS.tolist()]
    assert _value("l1_logit_norm", alpha=0.05) == pytest.approx(
        _mean([a + 0.05 * b for a, b in zip(nll, l1)])
    )
    # (0.5-1)^2 + 2 * 0.25^2; 0.1^2 + 0.6^2 + (0.3-1)^2; (0.1-1)^2 + 0.6^2 + 0.3^2
    brier = [0.375, 0.86, 1.26]
    assert _value("brier") == pytest.approx(_mean(brier))
    assert _value("mse") == pytest.approx(_mean(brier) / 3)


def _mmce_pairwise(conf, correct, width, estimator):
    """Kumar et al.'s pairwise sums written out sample pair by sample pair."""
    kernel = [[math.exp(-abs(a - b) / width) for b in conf] for a in conf]
    pairs = range(len(conf))
    if estimator == "unweighted":
        total = (
            sum(
                (correct[i] - conf[i]) * (correct[j] - conf[j]) * kernel[i][j]
                for i in pairs
                for j in pairs
            )
            / len(conf) ** 2
        )
        return math.sqrt(total + 1e-10)
    good = [i for i in pairs if correct[i]]
    bad = [i for i in pairs if not correct[i]]
    s_cc = sum((1 - conf[i]) * (1 - conf[j]) * kernel[i][j] for i in good for j in good)
    s_ww = sum(conf[i] * conf[j] * kernel[i][j] for i in bad for j in bad)
    s_cw = sum((1 - conf[i]) * conf[j] * kernel[i][j] for i in good for j in bad)
    m, n = len(good), len(bad)
    if estimator == "weighted":
        total = s_cc / m**2 + s_ww / n**2 - 2 * s_cw / (m * n)
    else:  # the released code: mean over the pair matrix, then / m^2, n^2, mn again
        total = s_cc / m**4 + s_ww / n**4 - 2 * s_cw / (m * n) ** 2
    return math.sqrt(total + 1e-10)


@pytest.mark.parametrize("estimator", ["weighted_code", "weighted", "unweighted"])
def test_mmce_matches_pairwise_definition(estimator):
    # Confidences 0.5, 0.8, 0.6, 0.7; the first two predictions are correct.
    probs = torch.tensor(
        [[0.5, 0.3, 0.2], [0.8, 0.1, 0.1], [0.6, 0.3, 0.1], [0.1, 0.7, 0.2]], dtype=torch.float64
    )
    labels = torch.tensor([0, 0, 1, 2])
    expected_mmce = _mmce_pairwise([0.5, 0.8, 0.6, 0.7], [1, 1, 0, 0], 0.4, estimator)
    nll = F.cross_entropy(probs.log(), labels).item()
    objective = build_objective("mmce", lam=2.0, estimator=estimator)
    assert objective(probs.log(), labels).item() == pytest.approx(nll + 2.0 * expected_mmce)


def test_weighted_mmce_vanishes_when_a_group_is_empty():
    logits, _ = _batch()
    all_correct = logits.argmax(1)
    for estimator in ("weighted", "weighted_code"):
        objective = build_objective("composite", secondary={"name": "mmce", "estimator": estimator})
        assert objective(logits, all_correct).item() == pytest.approx(
            F.cross_entropy(logits, all_correct).item()
        )
    unweighted = build_objective("composite", secondary={"name": "mmce", "estimator": "unweighted"})
    assert unweighted(logits, all_correct).item() > F.cross_entropy(logits, all_correct).item()


# Two-class batch: sample A p = (0.9, 0.1), label 0 (accurate); B p = (0.6, 0.4), label 1.
AVUC_LOGITS = torch.tensor([[0.9, 0.1], [0.6, 0.4]], dtype=torch.float64).log()
AVUC_LABELS = torch.tensor([0, 1])


def _entropy(p):
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def _secondary_only(name: str, **params) -> float:
    """Value of NLL + secondary minus NLL."""
    objective = build_objective("composite", secondary={"name": name, **params}, beta=1.0)
    nll = F.cross_entropy(AVUC_LOGITS, AVUC_LABELS).item()
    return objective(AVUC_LOGITS, AVUC_LABELS).item() - nll


def test_avuc_matches_hand_computed_value():
    h_a, h_b = _entropy(0.9), _entropy(0.6)  # normalised: 0.469, 0.971
    # kappa = 0.3: both uncertain -> n_AU = 0.9 tanh h_A, n_IU = (1 - 0.6) tanh h_B.
    expected = math.log1p(0.9 * math.tanh(h_a) / (0.4 * math.tanh(h_b) + 1e-10))
    assert _secondary_only("avuc", kappa=0.3) == pytest.approx(expected)
    assert _secondary_only("avuc_gs", kappa=0.3) == pytest.approx(expected)
    # kappa = 0.5: A certain, B uncertain -> n_AC, n_IU only, loss log(1 + 0) = 0.
    assert _secondary_only("avuc", kappa=0.5) == pytest.approx(0.0, abs=1e-12)


def test_soft_avuc_matches_hand_computed_value():
    h_a, h_b = _entropy(0.9), _entropy(0.6)
    t_a, t_b = h_a / math.log(2), h_b / math.log(2)  # kappa = 0.5, T = 1: t(h*) = h*
    n_au = t_a * math.tanh(h_a)
    n_ac = (1 - t_a) * (1 - math.tanh(h_a))
    n_iu = t_b * math.tanh(h_b)
    n_ic = (1 - t_b) * (1 - math.tanh(h_b))
    expected = math.log1p((n_au + n_ic) / (n_ac + n_iu + 1e-10))
    assert _secondary_only("soft_avuc", kappa=0.5, temperature=1.0) == pytest.approx(expected)
    # kappa = 0.2, T = 0.5: t = logistic(2 * log(h* 0.8 / ((1 - h*) 0.2))).
    t_a, t_b = (
        1 / (1 + math.exp(-2 * math.log(h * 0.8 / ((1 - h) * 0.2))))
        for h in (h_a / math.log(2), h_b / math.log(2))
    )
    expected = math.log1p(
        (t_a * math.tanh(h_a) + (1 - t_b) * (1 - math.tanh(h_b)))
        / ((1 - t_a) * (1 - math.tanh(h_a)) + t_b * math.tanh(h_b) + 1e-10)
    )
    assert _secondary_only("soft_avuc", kappa=0.2, temperature=0.5) == pytest.approx(expected)


# --- limits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("focal", {"gamma": 0}),
        ("focal", {"gamma": 0, "detach_pt": True}),
        ("inverse_focal", {"gamma": 0}),
        ("label_smoothing", {"epsilon": 0}),
        ("entropy_regularized", {"beta": 0}),
        ("l1_logit_norm", {"alpha": 0}),
        ("mixup", {}),
        ("composite", {}),
        ("composite", {"primary": {"name": "focal", "gamma": 0}, "secondary": "mmce", "beta": 0}),
    ],
)
def test_limits_equal_cross_entropy_in_value_and_gradient(name, params):
    logits, labels = _batch()
    reference_logits = logits.clone().requires_grad_(True)
    reference = F.cross_entropy(reference_logits, labels)
    reference.backward()
    logits.requires_grad_(True)
    loss = build_objective(name, **params)(logits, labels)
    loss.backward()
    torch.testing.assert_close(loss, reference)
    torch.testing.assert_close(logits.grad, reference_logits.grad)


def test_avuc_gs_equals_avuc_in_value_but_not_in_gradient():
    logits, labels = _batch(scale=1.0)
    grads, values = [], []
    for name in ("avuc", "avuc_gs"):
        leaf = logits.clone().requires_grad_(True)
        value = build_objective(name, kappa=0.5, beta=1.0)(leaf, labels)
        value.backward()
        values.append(value)
        grads.append(leaf.grad)
    torch.testing.assert_close(values[0], values[1])
    assert (grads[0] - grads[1]).abs().max() > 1e-4


def test_focal_detach_changes_gradient_not_value():
    logits, labels = _batch()
    results = []
    for detach in (False, True):
        leaf = logits.clone().requires_grad_(True)
        value = build_objective("focal", gamma=3, detach_pt=detach)(leaf, labels)
        value.backward()
        results.append((value, leaf.grad))
    torch.testing.assert_close(results[0][0], results[1][0])
    assert (results[0][1] - results[1][1]).abs().max() > 1e-4


def test_soft_avuc_approaches_hard_threshold_as_temperature_vanishes():
    """As T -> 0, t -> 1[h* > kappa]: S-AvUC becomes AvUC with confidence multiplicands 1."""
    logits, labels = _batch(scale=1.0)
    log_probs = logits.log_softmax(1)
    entropy = -(log_probs.exp() * log_probs).sum(1)
    uncertain = (entropy / math.log(10) > 0.6).double()
    correct = (logits.argmax(1) == labels).double()
    tanh = entropy.tanh()
    bad = (correct * uncertain * tanh + (1 - correct) * (1 - uncertain) * (1 - tanh)).sum()
    good = (correct * (1 - uncertain) * (1 - tanh) + (1 - correct) * uncertain * tanh).sum()
    objective = build_objective("soft_avuc", kappa=0.6, temperature=1e-4, beta=1.0)
    secondary = objective(logits, labels) - F.cross_entropy(logits, labels)
    torch.testing.assert_close(secondary, torch.log1p(bad / good), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("label_binned", [False, True], ids=["binned", "label_binned"])
@pytest.mark.parametrize(("p", "norm"), [(1, "l1"), (2, "l2")])
def test_sb_ece_tends_to_hard_ece_as_temperature_vanishes(label_binned, p, norm):
    logits, labels = _batch(n=200, scale=2.0)
    confidence = logits.softmax(1).max(1).values
    # Confident samples correct (underconfident bins), the rest random (overconfident bins):
    # with one sign in every bin the l1 estimates would equal mean(c) - accuracy for any binning.
    labels = torch.where(confidence > 0.6, logits.argmax(1), labels)
    # keep confidences away from bin edges, where soft and hard binning legitimately differ
    keep = (confidence * 15 - (confidence * 15).round()).abs() > 0.05
    logits, labels = logits[keep], labels[keep]
    objective = build_objective(
        "sb_ece", temperature=1e-6, label_binned=label_binned, p=p, n_bins=15, beta=1.0
    )
    soft = objective(logits, labels) - F.cross_entropy(logits, labels)
    hard_ece = metrics.ece_lb if label_binned else metrics.ece
    hard = hard_ece(logits, labels, n_bins=15, scheme="width", norm=norm)
    torch.testing.assert_close(soft, hard.to(soft.dtype), rtol=1e-6, atol=1e-8)
    # a soft temperature mixes neighbouring bins and moves the estimate away from it
    warm = build_objective("sb_ece", temperature=0.01, label_binned=label_binned, p=p, beta=1.0)
    assert (warm(logits, labels) - F.cross_entropy(logits, labels) - hard).abs() > 1e-3


# --- gradients -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "params"), EVERY_CONFIGURATION)
@pytest.mark.parametrize(
    ("scale", "all_correct"),
    [(1.0, False), (200.0, False), (200.0, True)],
    ids=["moderate", "saturated", "saturated_all_correct"],
)
def test_every_objective_has_finite_gradients(name, params, scale, all_correct):
    logits, labels = _batch(scale=scale)
    if all_correct:  # margins > 100: float32 softmax is exactly one-hot, calibration error 0
        logits = logits / scale + 200.0 * F.one_hot(labels, logits.shape[-1])
    logits = logits.float().requires_grad_(True)
    loss = build_objective(name, **params)(logits, labels)
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert torch.isfinite(logits.grad).all()


def test_secondary_losses_move_the_gradient():
    logits, labels = _batch(scale=1.0)
    nll = logits.clone().requires_grad_(True)
    F.cross_entropy(nll, labels).backward()
    for secondary in SECONDARIES[1:]:
        leaf = logits.clone().requires_grad_(True)
        build_objective("composite", secondary=secondary, beta=1.0)(leaf, labels).backward()
        assert (leaf.grad - nll.grad).abs().max() > 1e-5, secondary


# --- focal_loss function (γ-Net helper) --------------------------------------------------


def test_focal_loss_backpropagates_into_per_sample_gamma():
    logits, labels = _batch(n=16)
    gamma = torch.linspace(0.5, 4.0, 16, dtype=torch.float64, requires_grad=True)
    loss = focal_loss(logits, labels, gamma)
    loss.backward()
    p_t = logits.softmax(1).gather(1, labels[:, None])[:, 0]
    expected = -((1 - p_t) ** gamma.detach()) * (1 - p_t).log() * p_t.log() / 16
    torch.testing.assert_close(gamma.grad, expected)
    per_sample = focal_loss(logits, labels, gamma.detach(), reduction="none")
    assert per_sample.shape == (16,)
    for i in (0, 7, 15):
        value = float(gamma[i].detach())
        single = focal_loss(logits[i : i + 1], labels[i : i + 1], value, reduction="sum")
        torch.testing.assert_close(per_sample[i], single)


def test_focal_loss_gamma_gradient_is_finite_when_saturated():
    logits = torch.tensor([[300.0, 0.0, 0.0], [0.0, 0.5, 0.0]])
    gamma = torch.tensor([0.5, 2.0], requires_grad=True)
    leaf = logits.clone().requires_grad_(True)
    focal_loss(leaf, torch.tensor([0, 1]), gamma).backward()
    assert torch.isfinite(gamma.grad).all() and torch.isfinite(leaf.grad).all()


def test_focal_loss_rejects_bad_arguments():
    logits, labels = _batch(n=4)
    with pytest.raises(ValueError, match="reduction"):
        focal_loss(logits, labels, 1.0, reduction="avg")
    with pytest.raises(ValueError, match="gamma"):
        focal_loss(logits, labels, -1.0)
    # the objective's rule: an infinite gamma made every loss 0, a bool passed as 1
    for gamma, message in (
        (float("inf"), "finite"),
        (float("nan"), "finite"),
        (True, "must be a number"),
    ):
        with pytest.raises(ValueError, match=f"gamma .*{message}"):
            focal_loss(logits, labels, gamma)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        focal_loss(logits, labels, torch.ones(3))


# --- soft targets and mixup -------------------------------------------------------------


# SB-ECE and AdaFocal refuse target probabilities (tested with each)
@pytest.mark.parametrize(
    ("name", "params"),
    [c for c in EVERY_CONFIGURATION if not c.id.endswith(("sb_ece", "adafocal"))],
)
def test_one_hot_probabilities_give_the_same_loss_as_class_indices(name, params):
    logits, labels = _batch()
    objective = build_objective(name, **params)
    soft = F.one_hot(labels, 10).double()
    torch.testing.assert_close(objective(logits, soft), objective(logits, labels))


def test_sb_ece_rejects_target_probabilities():
    logits, labels = _batch()
    with pytest.raises(ValueError, match="class-index targets"):
        build_objective("sb_ece")(logits, F.one_hot(labels, 10).double())


@pytest.mark.parametrize(
    "name",
    [
        "cross_entropy",
        "focal",
        "label_smoothing",
        "flsd53",
        "inverse_focal",
        "mixup",
        "dual_focal",
        "mbls",
        "logit_norm",
    ],
)
def test_soft_target_loss_is_linear_in_the_targets(name):
    """Losses that are expectations over q mix linearly: L(lam q_a + (1-lam) q_b)."""
    logits, labels = _batch()
    other = labels.roll(1)
    objective = build_objective(name)
    mixed = 0.3 * F.one_hot(labels, 10).double() + 0.7 * F.one_hot(other, 10).double()
    expected = 0.3 * objective(logits, labels) + 0.7 * objective(logits, other)
    torch.testing.assert_close(objective(logits, mixed), expected)


def test_narrow_target_probabilities_are_zero_padded():
    logits, _ = _batch(k=5)
    narrow = torch.softmax(torch.randn(64, 3, dtype=torch.float64), 1)
    padded = F.pad(narrow, (0, 2))
    objective = build_objective("composite", primary="mse", secondary="soft_avuc")
    torch.testing.assert_close(objective(logits, narrow), objective(logits, padded))


def test_mix_batch_is_reproducible_and_consistent():
    objective = build_objective("mixup", alpha=1.0)
    assert isinstance(objective, MixupObjective)
    labels = torch.arange(10).repeat(3)
    inputs = F.one_hot(labels, 10).float()  # inputs equal to targets: mixing must match
    first = objective.mix_batch(inputs, labels, torch.Generator().manual_seed(7))
    again = objective.mix_batch(inputs, labels, torch.Generator().manual_seed(7))
    other = objective.mix_batch(inputs, labels, torch.Generator().manual_seed(8))
    torch.testing.assert_close(first, again)
    assert not torch.equal(first[0], other[0])
    mixed_inputs, soft = first
    torch.testing.assert_close(mixed_inputs, soft)
    torch.testing.assert_close(soft.sum(1), torch.ones(30))


def test_mixup_loss_is_the_lambda_mixture_of_cross_entropies():
    objective = build_objective("mixup", alpha=0.4)
    logits, labels = _batch(n=8)
    inputs = torch.eye(8)  # row i of the mixed inputs is lam e_i + (1 - lam) e_perm(i)
    mixed, soft = objective.mix_batch(inputs, labels, torch.Generator().manual_seed(3))
    own = mixed.diagonal()
    lam = own[own < 1].min()
    perm = torch.where(own == 1, torch.arange(8), (mixed - torch.diag(own)).argmax(1))
    expected = lam * F.cross_entropy(logits, labels) + (1 - lam) * F.cross_entropy(
        logits, labels[perm]
    )
    torch.testing.assert_close(objective(logits, soft), expected.to(logits.dtype))


@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_mix_batch_draws_lambda_from_beta_alpha_alpha(alpha):
    objective = build_objective("mixup", alpha=alpha)
    generator = torch.Generator().manual_seed(0)
    inputs, labels = torch.tensor([[1.0], [0.0]]), torch.tensor([0, 1])
    lams = []
    for _ in range(3000):
        mixed, _ = objective.mix_batch(inputs, labels, generator, num_classes=2)
        if mixed[1, 0] > 0:  # the two samples were paired with each other: mixed[0] = lam
            lams.append(mixed[0, 0].item())
    assert len(lams) > 1200
    # Kolmogorov-Smirnov against Beta(alpha, alpha): a wrong law (e.g. Uniform, or
    # Beta(alpha, 1)) is rejected at these sample sizes.
    assert stats.kstest(lams, stats.beta(alpha, alpha).cdf).pvalue > 0.01
    assert stats.kstest(lams, stats.beta(alpha, 2 * alpha).cdf).pvalue < 1e-4


def test_mix_batch_widens_targets_to_num_classes():
    objective = build_objective("mixup", alpha=1.0)
    labels = torch.tensor([0, 1, 1])
    _, soft = objective.mix_batch(torch.zeros(3, 2), labels, torch.Generator(), num_classes=5)
    assert soft.shape == (3, 5)
    assert soft[:, 2:].abs().sum() == 0
    _, narrow = objective.mix_batch(torch.zeros(3, 2), labels, torch.Generator())
    assert narrow.shape == (3, 2)


# --- composition and L2 ------------------------------------------------------------------


@pytest.mark.parametrize("primary", PRIMARIES)
@pytest.mark.parametrize("secondary", SECONDARIES)
def test_full_grid_is_expressible_in_parameters(primary, secondary):
    objective = build_objective("composite", primary=primary, secondary=secondary, beta=0.5)
    assert objective.hyperparameters["primary"]["name"] == _term_name(primary)
    assert objective.hyperparameters["secondary"]["name"] == _term_name(secondary)
    logits, labels = _batch()
    assert torch.isfinite(objective(logits, labels))


def test_composite_adds_beta_times_secondary_and_l2_of_weight_matrices():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3)
    ).double()
    inputs, labels = torch.randn(32, 4, dtype=torch.float64), torch.randint(0, 3, (32,))
    logits = model(inputs)
    focal = build_objective("focal", gamma=2)(logits, labels)
    mmce_alone = build_objective("mmce", lam=1.0)(logits, labels) - F.cross_entropy(logits, labels)
    l2 = model[0].weight.square().sum() + model[2].weight.square().sum()
    objective = build_objective(
        "composite", primary={"name": "focal", "gamma": 2}, secondary="mmce", beta=0.7, l2=1e-3
    )
    torch.testing.assert_close(
        objective(logits, labels, model=model, epoch=3, features=None),
        focal + 0.7 * mmce_alone + 1e-3 * l2,
    )
    with pytest.raises(ValueError, match="needs the model"):
        objective(logits, labels)


@pytest.mark.parametrize(("name", "params"), EVERY_CONFIGURATION)
def test_hyperparameters_rebuild_the_same_objective_and_pickle(name, params):
    objective = build_objective(name, **params)
    assert objective.name == name
    rebuilt = build_objective(name, **objective.hyperparameters)
    assert rebuilt.hyperparameters == objective.hyperparameters
    restored = pickle.loads(pickle.dumps(objective))
    logits, labels = _batch()
    torch.testing.assert_close(restored(logits, labels), objective(logits, labels))


def test_defaults_are_the_papers_values():
    assert build_objective("label_smoothing").hyperparameters == {"epsilon": 0.05}
    assert build_objective("entropy_regularized").hyperparameters == {"beta": 0.1}
    assert build_objective("mixup").hyperparameters == {"alpha": 0.2}
    assert build_objective("focal").hyperparameters == {"gamma": 3.0, "detach_pt": False}
    mmce = build_objective("mmce").hyperparameters
    assert mmce["lam"] == 2.0 and mmce["width"] == 0.4
    sb_ece = build_objective("sb_ece").hyperparameters
    assert sb_ece["n_bins"] == 15 and sb_ece["label_binned"] is True


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("focal", {"gamma": -1}, r"gamma must be in \[0.0, inf\), got -1"),
        ("focal", {"detach_pt": "yes"}, "detach_pt must be true or false"),
        ("label_smoothing", {"epsilon": 1.0}, r"epsilon must be in \[0.0, 1.0\), got 1.0"),
        ("label_smoothing", {"epsilon": -0.1}, "epsilon must be in"),
        ("mixup", {"alpha": 0}, r"alpha must be in \(0.0, inf\), got 0"),
        ("entropy_regularized", {"beta": -0.1}, "beta must be in"),
        ("inverse_focal", {"gamma": float("nan")}, "gamma must be a finite number, got nan"),
        ("l1_logit_norm", {"alpha": "big"}, "alpha must be a number"),
        ("focal", {"gamma": float("inf")}, "gamma must be a finite number, got inf"),
        ("focal", {"gamma": True}, "gamma must be a number, got True"),
        ("mixup", {"alpha": float("inf")}, "alpha must be a finite number, got inf"),
        ("composite", {"beta": float("inf")}, "beta must be a finite number"),
        ("mmce", {"lam": -2}, "lam must be in"),
        ("mmce", {"width": 0}, "width must be in"),
        ("mmce", {"estimator": "kumar"}, "estimator must be one of"),
        ("avuc", {"kappa": 1.0}, r"kappa must be in \(0.0, 1.0\)"),
        ("soft_avuc", {"temperature": 0}, "temperature must be in"),
        ("sb_ece", {"n_bins": 0}, "n_bins must be an integer >= 1"),
        ("sb_ece", {"p": 0.5}, r"p must be in \[1.0, inf\)"),
        ("focal", {"gama": 2}, r"unknown parameter\(s\) \['gama'\]"),
        (
            "composite",
            {"primary": "ce"},
            "valid primary loss names are: focal, label_smoothing, mse, nll",
        ),
        ("composite", {"secondary": "dece"}, "valid secondary loss names are: avuc, avuc_gs"),
        ("composite", {"secondary": {"kappa": 0.5}}, "mapping with a 'name' key"),
        ("composite", {"primary": {"name": "focal", "gamma": -3}}, "gamma must be in"),
        ("composite", {"secondary": {"name": "none", "beta": 1}}, "unknown parameter"),
        ("composite", {"l2": -1e-4}, "l2 must be in"),
    ],
)
def test_invalid_hyperparameters_are_rejected_at_build_time(name, params, message):
    with pytest.raises(ValueError, match=message):
        build_objective(name, **params)


def test_unknown_objective_lists_the_valid_names():
    with pytest.raises(ValueError) as error:
        build_objective("cross_entropie")
    for name in ("cross_entropy", "focal", "mixup", "composite", "sb_ece", "soft_avuc"):
        assert name in str(error.value)


@pytest.mark.parametrize(
    ("logits", "targets"),
    [
        (torch.randn(4), torch.tensor([0, 1, 2, 3])),
        (torch.randn(4, 3), torch.tensor([0, 1, 2])),
        (torch.randn(4, 3), torch.rand(4, 5)),
        (torch.randn(4, 3), torch.tensor([0.0, 1.0, 2.0, 0.0])),
        (torch.randint(0, 3, (4, 3)), torch.tensor([0, 1, 2, 0])),
    ],
)
def test_malformed_batches_are_rejected(logits, targets):
    with pytest.raises(ValueError, match=r"logits|targets"):
        build_objective("cross_entropy")(logits, targets)


def test_mmce_gradient_is_finite_on_all_wrong_and_all_correct_batches():
    # regression: count clamping to a tiny float underflowed to 0 in float32 and made the
    # masked-out branch NaN, which torch.where passed on to the gradient
    from calib_pipeline.calibration.losses import build_objective

    objective = build_objective("composite", primary="mse", secondary={"name": "mmce"}, beta=1.0)
    for logits, targets in (
        (torch.tensor([[5.0, 0.0], [4.0, 0.0]]), torch.tensor([1, 1])),  # all wrong
        (torch.tensor([[5.0, 0.0], [4.0, 0.0]]), torch.tensor([0, 0])),  # all correct
    ):
        logits = logits.clone().requires_grad_(True)
        objective(logits, targets).backward()
        assert torch.isfinite(logits.grad).all()


def test_focal_second_derivative_is_finite_on_saturated_samples():
    # the γ-Net look-ahead differentiates the focal loss twice; with p_t == 1 in float32
    # (1 - p_t)^γ has an infinite slope for γ < 1 unless computed in log space
    from calib_pipeline.calibration.losses import focal_loss

    logits = torch.tensor([[120.0, 0.0, -3.0], [0.5, 0.2, 0.1]], requires_grad=True)
    gamma = torch.tensor([0.5, 0.3], requires_grad=True)
    targets = torch.tensor([0, 2])
    loss = focal_loss(logits, targets, gamma)
    (grad_logits,) = torch.autograd.grad(loss, logits, create_graph=True)
    (grad_gamma,) = torch.autograd.grad(grad_logits.square().sum(), gamma)
    assert (
        torch.isfinite(loss)
        and torch.isfinite(grad_logits).all()
        and torch.isfinite(grad_gamma).all()
    )


@pytest.mark.parametrize(
    ("name", "params", "fused"),
    [
        ("cross_entropy", {}, True),
        ("label_smoothing", {"epsilon": 0.1}, True),
        ("mixup", {}, True),  # cross-entropy on mixed (probability) targets
        ("composite", {"secondary": "mmce", "beta": 2.0}, True),  # nll primary + a batch term
        ("focal", {"gamma": 2.0}, False),
        ("entropy_regularized", {"beta": 0.1}, False),
    ],
)
@pytest.mark.parametrize("soft", [False, True])
def test_fused_batch_mean_equals_the_mean_of_the_per_sample_loss(name, params, fused, soft):
    """CE-type primaries reduce inside F.cross_entropy; value and gradient are the per-sample
    mean's (class indices and probability targets), and other primaries keep .mean()."""
    objective = build_objective(name, **params)
    assert (objective._fused_mean is not None) == fused
    logits, labels = _batch()
    targets = F.one_hot(labels, logits.shape[1]).double() * 0.7 + 0.1 if soft else labels
    fused_logits = logits.clone().requires_grad_(True)
    loss = objective(fused_logits, targets)
    loss.backward()
    plain_logits = logits.clone().requires_grad_(True)
    expected = objective._primary(plain_logits, targets).mean()
    if objective._secondary is not None:
        expected = expected + objective._beta * objective._secondary(plain_logits, targets)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(fused_logits.grad, plain_logits.grad)

"""AdaFocal and CALS against hand computations from the papers' definitions (values,
gradients, state updates), their bin and state edge cases, and their failure paths."""

from __future__ import annotations

import math

import pytest
import torch

from calib_pipeline.calibration._losses_adaptive import adafocal_gamma_update
from calib_pipeline.calibration.losses import build_objective, objective_names
from calib_pipeline.calibration.methods import MethodSpec, build_method


def _softmax(row: list[float]) -> list[float]:
    exps = [math.exp(v) for v in row]
    return [e / sum(exps) for e in exps]


# --- AdaFocal -------------------------------------------------------------------------------

# (logits, label) with p_t in bin 0 (<= 0.3), bin 1 ((0.3, 0.6]) and bin 2 (> 0.6)
SAMPLES = [([0.0, 1.0, 0.0], 0), ([1.0, 0.0, 0.0], 0), ([2.0, 0.0, 0.0], 0), ([0.0, 0.0, 3.0], 2)]
EDGES = [0.0, 0.3, 0.6, 1.0]
GAMMAS = [2.0, -1.0, 0.5]  # bin 1 is in inverse-focal mode with |γ| = 1


def _adafocal_with(gammas, edges):
    objective = build_objective("adafocal", n_bins=len(gammas))
    objective.gammas = torch.tensor(gammas, dtype=torch.float64)
    objective.edges = torch.tensor(edges, dtype=torch.float64)
    return objective


def _hand_adafocal(logits_row, label):
    """Loss and d loss / d logits of one sample from the paper's definitions."""
    probs = _softmax(logits_row)
    p = probs[label]
    gamma = GAMMAS[sum(p > edge for edge in EDGES[1:-1])]  # (lo, hi] bins
    if gamma >= 0:  # focal: -(1 - p)^γ log p
        loss = -((1 - p) ** gamma) * math.log(p)
        d_p = gamma * (1 - p) ** (gamma - 1) * math.log(p) - (1 - p) ** gamma / p
    else:  # inverse focal: -(1 + p)^|γ| log p
        g = -gamma
        loss = -((1 + p) ** g) * math.log(p)
        d_p = -g * (1 + p) ** (g - 1) * math.log(p) - (1 + p) ** g / p
    # dp_t / dz_k = p_t (1[k = t] - p_k)
    grad = [d_p * p * ((k == label) - probs[k]) for k in range(len(probs))]
    return loss, grad


def test_adafocal_loss_and_gradient_equal_the_hand_computation():
    objective = _adafocal_with(GAMMAS, EDGES)
    logits = torch.tensor([s[0] for s in SAMPLES], dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([s[1] for s in SAMPLES])
    loss = objective(logits, labels)
    loss.backward()
    hand = [_hand_adafocal(row, label) for row, label in SAMPLES]
    n = len(SAMPLES)
    assert float(loss.detach()) == pytest.approx(sum(h[0] for h in hand) / n, rel=1e-12)
    expected_grad = torch.tensor([h[1] for h in hand], dtype=torch.float64) / n
    torch.testing.assert_close(logits.grad, expected_grad, rtol=1e-10, atol=1e-12)
    chosen = objective.sample_gammas(logits.detach(), labels)
    assert chosen.tolist() == [2.0, -1.0, 0.5, 0.5]


def test_adafocal_bin_assignment_at_edges_and_saturation():
    objective = _adafocal_with([1.0, 3.0], [0.0, 0.5, 1.0])
    logits = torch.tensor([[0.0, 0.0], [200.0, 0.0], [-200.0, 0.0], [0.0, -1e-6]])
    labels = torch.tensor([0, 0, 0, 0])
    # p_t = 0.5 exactly is on the edge: (lo, hi] puts it in the lower bin; p_t = 1 (a
    # saturated softmax) is in the last bin, p_t ~ 0 in the first; just above the edge: upper
    gammas = objective.sample_gammas(logits, labels).tolist()
    assert gammas == [1.0, 3.0, 1.0, 3.0]
    value = objective(logits.requires_grad_(True), labels)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(logits.grad).all()


@pytest.mark.parametrize(
    ("gamma", "gap", "expected"),
    [
        (1.0, 0.1, math.exp(0.1)),  # over-confident bin, focal mode: γ grows
        (2.0, -0.3, 2.0 * math.exp(-0.3)),  # under-confident bin, focal mode: γ shrinks
        (0.25, -0.3, -0.2),  # 0.25 e^-0.3 = 0.185 < S_th: switch to inverse focal, |γ| = S_th
        (-0.5, -0.2, -0.5 * math.exp(0.2)),  # inverse mode, under-confident: |γ| grows
        (-0.21, 0.1, 0.2),  # inverse mode, over-confident: |γ| = 0.19 < S_th: back to focal
        (19.0, 0.5, 20.0),  # clipped to γ_max
        (-1.9, -0.2, -2.0),  # clipped to γ_min
        (3.0, 0.0, 3.0),  # a calibrated (or empty) bin keeps its γ
    ],
)
def test_adafocal_gamma_update_follows_the_rule(gamma, gap, expected):
    updated = adafocal_gamma_update(
        torch.tensor([gamma, 1.0], dtype=torch.float64),
        torch.tensor([gap, 0.0], dtype=torch.float64),
        lam=1.0,
        switch_threshold=0.2,
        gamma_min=-2.0,
        gamma_max=20.0,
    )
    assert float(updated[0]) == pytest.approx(expected, rel=1e-12)
    assert float(updated[1]) == 1.0


def test_adafocal_lambda_scales_the_exponent():
    gammas = torch.tensor([1.5], dtype=torch.float64)
    gaps = torch.tensor([0.2], dtype=torch.float64)
    options = {"switch_threshold": 0.2, "gamma_min": -2.0, "gamma_max": 20.0}
    updated = adafocal_gamma_update(gammas, gaps, lam=3.0, **options)
    assert float(updated) == pytest.approx(1.5 * math.exp(0.6), rel=1e-12)


def _two_class_logits(confidences, correct):
    """Logits whose softmax confidence is ``c`` for class 0, labels 0 when correct."""
    logits = torch.tensor([[math.log(c), math.log(1 - c)] for c in confidences])
    return logits, torch.tensor([0 if ok else 1 for ok in correct])


def test_adafocal_observes_the_val_split_through_equal_mass_bins():
    objective = build_objective("adafocal", n_bins=2)
    logits, labels = _two_class_logits([0.6, 0.9, 0.7, 0.8], [True, True, False, True])
    stats = objective.observe_validation(logits, labels, epoch=1)
    # equal mass: {0.6, 0.7} and {0.8, 0.9}, edge at their midpoint 0.75; gaps
    # conf - acc = 0.65 - 0.5 = 0.15 and 0.85 - 1 = -0.15
    assert objective.edges.tolist() == pytest.approx([0.0, 0.75, 1.0], abs=1e-7)
    expected = [math.exp(0.15), math.exp(-0.15)]
    assert objective.gammas.tolist() == pytest.approx(expected, rel=1e-6)
    assert [float(v) for v in stats.values()] == pytest.approx(expected, rel=1e-6)
    assert list(stats) == ["adafocal_gamma_bin00", "adafocal_gamma_bin01"]
    # the next train batch is binned with the val edges: p_t = 0.7 falls in bin 0
    train_logits, train_labels = _two_class_logits([0.7, 0.8], [True, True])
    chosen = objective.sample_gammas(train_logits, train_labels)
    assert chosen.tolist() == pytest.approx(expected, rel=1e-6)


def test_adafocal_tied_val_confidences_leave_the_empty_bins_gamma_unchanged():
    objective = build_objective("adafocal", n_bins=3, gamma_initial=2.0)
    logits, labels = _two_class_logits([0.75] * 6, [True, False, True, True, True, True])
    objective.observe_validation(logits, labels, epoch=1)
    # one tie group: it is never split, so it fills the first bin and the others are empty
    gap = 0.75 - 5 / 6
    assert objective.gammas.tolist() == pytest.approx([2.0 * math.exp(gap), 2.0, 2.0], rel=1e-6)


def test_adafocal_state_round_trips_and_refuses_another_configuration():
    objective = build_objective("adafocal", n_bins=2)
    logits, labels = _two_class_logits([0.6, 0.9, 0.7, 0.8], [True, True, False, True])
    objective.observe_validation(logits, labels, epoch=1)
    state = objective.state_dict()
    fresh = build_objective("adafocal", n_bins=2)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.gammas, objective.gammas) and torch.equal(fresh.edges, objective.edges)
    with pytest.raises(ValueError, match="hyperparameters"):
        build_objective("adafocal", n_bins=2, lam=2.0).load_state_dict(state)
    with pytest.raises(ValueError, match="'cals'"):
        build_objective("cals").load_state_dict(state)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_bins": 0}, "n_bins must be an integer >= 1"),
        ({"lam": 0.0}, r"lam must be in \(0.0, inf\)"),
        ({"switch_threshold": 0.0}, "switch_threshold"),
        ({"gamma_min": -0.1}, r"gamma_min must be in \(-inf, -0.2\]"),
        ({"gamma_max": 0.1}, r"gamma_max must be in \[0.2, inf\)"),
        ({"gamma_initial": 0.1}, "gamma_initial must be in"),
        ({"gamma_initial": 25.0}, "gamma_initial must be in"),
        ({"gamma_initial": float("nan")}, "gamma_initial"),
        ({"bins": 15}, "bins"),
    ],
)
def test_adafocal_refuses_bad_hyperparameters(params, message):
    with pytest.raises(ValueError, match=message):
        build_objective("adafocal", **params)


def test_adafocal_refuses_soft_targets():
    objective = build_objective("adafocal")
    with pytest.raises(ValueError, match="class-index targets"):
        objective(torch.zeros(2, 3), torch.full((2, 3), 1 / 3))


# --- CALS -----------------------------------------------------------------------------------


def _hand_cals(rows, labels, multipliers, rho, margin):
    """CE + mean over samples and classes of the PHR penalty of the normalised logit
    distances, and its gradient, by the paper's definitions."""
    n, k = len(rows), len(rows[0])
    loss, grads = 0.0, []
    for row, label in zip(rows, labels, strict=True):
        probs = _softmax(row)
        top = max(range(k), key=lambda j: row[j])
        grad = [probs[j] - (j == label) for j in range(k)]  # CE, before the 1/n
        loss += -math.log(probs[label])
        for c in range(k):
            h = (row[top] - row[c] - margin) / margin
            x = multipliers[c] + rho[c] * h
            loss += ((max(0.0, x) ** 2 - multipliers[c] ** 2) / (2 * rho[c])) / k
            slope = max(0.0, x) / margin / k  # dP/dh * dh/dz_top, and minus it for z_c
            grad[top] += slope
            grad[c] -= slope
        grads.append([g / n for g in grad])
    return loss / n, grads


def test_cals_loss_and_gradient_equal_the_hand_computation():
    rows = [[3.0, 1.0, -2.0], [0.5, 4.0, 1.5]]
    labels = [0, 2]
    multipliers, rho = [0.5, 1.0, 2.0], [1.0, 2.0, 1.0]
    objective = build_objective("cals", margin=2.0)
    objective.multipliers = torch.tensor(multipliers, dtype=torch.float64)
    objective.rho = torch.tensor(rho, dtype=torch.float64)
    logits = torch.tensor(rows, dtype=torch.float64, requires_grad=True)
    loss = objective(logits, torch.tensor(labels))
    loss.backward()
    hand_loss, hand_grad = _hand_cals(rows, labels, multipliers, rho, margin=2.0)
    assert float(loss.detach()) == pytest.approx(hand_loss, rel=1e-12)
    torch.testing.assert_close(logits.grad, torch.tensor(hand_grad, dtype=torch.float64))


def test_cals_without_normalisation_uses_raw_distances():
    objective = build_objective("cals", margin=2.0, normalize=False)
    objective.multipliers = torch.tensor([1.0, 1.0], dtype=torch.float64)
    objective.rho = torch.tensor([1.0, 1.0], dtype=torch.float64)
    logits = torch.tensor([[5.0, 0.0]], dtype=torch.float64)
    ce = -math.log(_softmax([5.0, 0.0])[0])
    # h = (0 - 2, 5 - 2) = (-2, 3): x = (-1, 4): P = (-1/2, (16 - 1)/2)
    assert float(objective(logits, torch.tensor([0]))) == pytest.approx(ce + (-0.5 + 7.5) / 2)


def _hand_multiplier_update(rows, multipliers, rho, margin, low, high):
    k = len(rows[0])
    updated = []
    for c in range(k):
        estimates = []
        for row in rows:
            h = (max(row) - row[c] - margin) / margin
            estimates.append(min(high, max(low, max(0.0, multipliers[c] + rho[c] * h))))
        updated.append(min(high, max(low, sum(estimates) / len(estimates))))
    return updated


def test_cals_multipliers_and_penalty_weights_follow_the_val_split():
    objective = build_objective("cals", margin=2.0, rho_step=2, rho_growth=1.5, rho_tolerance=0.9)
    labels = torch.tensor([0, 1])
    first = [[6.0, 0.0, 1.0], [0.0, 1.0, 0.5]]
    objective.observe_validation(torch.tensor(first), labels, epoch=1)
    expected = _hand_multiplier_update(first, [1e-6] * 3, [1.0] * 3, 2.0, 1e-6, 1e6)
    assert objective.multipliers.tolist() == pytest.approx(expected, rel=1e-6)
    assert objective.rho.tolist() == [1.0, 1.0, 1.0], "ρ changes only every rho_step epochs"
    first_means = [sum((max(r) - r[c] - 2.0) / 2.0 for r in first) / 2 for c in range(3)]
    second = [[6.0, 0.0, 2.0], [0.0, 1.0, 0.5]]
    multipliers_before = objective.multipliers.tolist()
    stats = objective.observe_validation(torch.tensor(second), labels, epoch=2)
    expected = _hand_multiplier_update(second, multipliers_before, [1.0] * 3, 2.0, 1e-6, 1e6)
    assert objective.multipliers.tolist() == pytest.approx(expected, rel=1e-6)
    second_means = [sum((max(r) - r[c] - 2.0) / 2.0 for r in second) / 2 for c in range(3)]
    grows = [
        now > 0.9 * max(before, 0.0) for now, before in zip(second_means, first_means, strict=True)
    ]
    # means (-0.75, 0.5, 0.375) then (-0.75, 0.5, 0.125): only class 1 did not improve
    assert grows == [False, True, False]
    assert objective.rho.tolist() == pytest.approx([1.5 if g else 1.0 for g in grows])
    assert float(stats["cals_val_constraint_mean"]) == pytest.approx(sum(second_means) / 3)


def test_cals_rho_stays_within_its_bounds_and_can_be_frozen():
    frozen = build_objective("cals", rho_step=0)
    capped = build_objective("cals", rho_step=1, rho_growth=4.0, rho_max=5.0)
    logits = torch.tensor([[30.0, 0.0, 0.0], [0.0, 30.0, 0.0]])
    labels = torch.tensor([0, 1])
    for epoch in range(1, 5):
        scaled = logits * epoch  # distances grow: the constraint never improves
        frozen.observe_validation(scaled, labels, epoch=epoch)
        capped.observe_validation(scaled, labels, epoch=epoch)
    assert frozen.rho.tolist() == [1.0, 1.0, 1.0]
    assert max(capped.rho.tolist()) == 5.0


def test_cals_state_round_trips_and_refuses_other_class_counts():
    objective = build_objective("cals")
    objective.observe_validation(torch.randn(5, 4) * 20, torch.zeros(5, dtype=torch.long), epoch=1)
    fresh = build_objective("cals")
    fresh.load_state_dict(objective.state_dict())
    assert torch.equal(fresh.multipliers, objective.multipliers)
    assert torch.equal(fresh.previous_constraint, objective.previous_constraint)
    with pytest.raises(ValueError, match="multipliers of 4 classes, the logits have 3"):
        fresh(torch.zeros(2, 3), torch.tensor([0, 1]))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"margin": 0.0}, "margin"),
        ({"normalize": "yes"}, "normalize must be true or false"),
        ({"lambda_min": 0.0}, "lambda_min"),
        ({"lambda_min": 1.0, "lambda_max": 0.5}, "lambda_max"),
        ({"rho_min": 2.0, "rho_max": 1.0}, "rho_max"),
        ({"rho_step": -1}, "rho_step must be an integer >= 0"),
        ({"rho_step": 2.5}, "rho_step"),
        ({"rho_growth": 0.9}, "rho_growth"),
        ({"penalty": "p2"}, "penalty"),
    ],
)
def test_cals_refuses_bad_hyperparameters(params, message):
    with pytest.raises(ValueError, match=message):
        build_objective("cals", **params)


# --- both: the learner declares that it reads the val split -----------------------------------


@pytest.mark.parametrize("name", ["adafocal", "cals"])
def test_the_learner_of_an_adaptive_objective_declares_it_and_carries_its_state(name):
    assert name in objective_names()
    learner = build_method(MethodSpec(key=name, objective=name), num_classes=3, feature_dim=4)
    assert "val split" in learner.validation_feedback
    logits, labels = torch.randn(6, 3) * 5, torch.tensor([0, 1, 2, 0, 1, 2])
    stats = learner.observe_validation(logits, labels, epoch=1)
    assert stats and all(value.ndim == 0 for value in stats.values())
    assert learner.state_dict()["name"] == name


def test_a_plain_objective_neither_reads_the_val_split_nor_accepts_an_update():
    learner = build_method(MethodSpec(key="ce", objective="cross_entropy"), 3, 4)
    assert learner.validation_feedback is None
    assert learner.state_dict() == {}
    with pytest.raises(ValueError, match="does not read the val split"):
        learner.observe_validation(torch.zeros(2, 3), torch.tensor([0, 1]), epoch=1)

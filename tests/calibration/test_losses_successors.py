"""Dual Focal, MbLS, LogitNorm and MDCA (issue 31) against their papers' equations.

Every reference below is written out independently of the library, sample by sample and
class by class with NumPy, from the equation in docs/objectives.md; the gradients are
compared with central differences of those references.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from calib_pipeline.calibration.losses import build_objective


def _softmax(row: np.ndarray) -> np.ndarray:
    exps = np.exp(row - row.max())
    return exps / exps.sum()


def _dual_focal_reference(logits: np.ndarray, labels: np.ndarray, gamma: float) -> float:
    """Tao et al.: mean_i -(1 - p_y + p_j)^gamma log p_y, p_j the largest p below p_y."""
    total = 0.0
    for row, label in zip(logits, labels):
        probs = _softmax(row)
        p_y = probs[label]
        lower = [probs[k] for k in range(len(probs)) if probs[k] < p_y]
        p_j = max(lower) if lower else 0.0
        total += -((1.0 - p_y + p_j) ** gamma) * math.log(p_y)
    return total / len(labels)


def _mbls_reference(logits: np.ndarray, labels: np.ndarray, margin: float, lam: float) -> float:
    """Liu et al.: mean_i [CE_i + lam * (1/K) sum_k max(0, max_j z_ij - z_ik - margin)]."""
    total = 0.0
    for row, label in zip(logits, labels):
        penalty = sum(max(0.0, row.max() - z - margin) for z in row) / len(row)
        total += -math.log(_softmax(row)[label]) + lam * penalty
    return total / len(labels)


def _logit_norm_reference(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """Wei et al.: mean_i -log softmax(z_i / (tau ||z_i||))_y (norm + 1e-7, authors' code)."""
    total = 0.0
    for row, label in zip(logits, labels):
        norm = math.sqrt(sum(z * z for z in row)) + 1e-7
        total += -math.log(_softmax(row / (temperature * norm))[label])
    return total / len(labels)


def _mdca_reference(logits: np.ndarray, labels: np.ndarray) -> float:
    """Hebbalaguppe et al.: (1/K) sum_k |(1/N) sum_i p_ik - (1/N) sum_i 1[y_i = k]|."""
    n, k = logits.shape
    probs = np.stack([_softmax(row) for row in logits])
    gaps = [abs(probs[:, c].sum() / n - sum(1 for y in labels if y == c) / n) for c in range(k)]
    return sum(gaps) / k


def _focal_reference(logits: np.ndarray, labels: np.ndarray, gamma: float) -> float:
    probs = [_softmax(row)[label] for row, label in zip(logits, labels)]
    return sum(-((1.0 - p) ** gamma) * math.log(p) for p in probs) / len(labels)


def _label_smoothing_reference(logits: np.ndarray, labels: np.ndarray, epsilon: float) -> float:
    k = logits.shape[1]
    total = 0.0
    for row, label in zip(logits, labels):
        target = np.full(k, epsilon / k)
        target[label] += 1.0 - epsilon
        total += -(target * np.log(_softmax(row))).sum()
    return total / len(labels)


def _nll_reference(logits: np.ndarray, labels: np.ndarray) -> float:
    return _label_smoothing_reference(logits, labels, 0.0)


def _numeric_gradient(reference, logits: np.ndarray, step: float = 1e-6) -> np.ndarray:
    gradient = np.zeros_like(logits)
    for index in np.ndindex(*logits.shape):
        up, down = logits.copy(), logits.copy()
        up[index] += step
        down[index] -= step
        gradient[index] = (reference(up) - reference(down)) / (2 * step)
    return gradient


# Four samples, K = 4: the target ranks first, second, last and third; no ties, no logit
# distance within 1e-3 of a margin used below (the hinge's kinks).
LOGITS = np.array(
    [
        [2.0, 0.5, -1.0, 0.3],
        [0.1, 1.7, 0.9, -0.4],
        [1.2, -0.3, 0.6, -2.0],
        [-0.5, 3.1, 0.2, 1.4],
    ]
)
LABELS = np.array([0, 2, 3, 2])

CASES = [
    ("dual_focal", {"gamma": 5.0}, lambda z: _dual_focal_reference(z, LABELS, 5.0)),
    ("dual_focal", {"gamma": 0.5}, lambda z: _dual_focal_reference(z, LABELS, 0.5)),
    ("mbls", {}, lambda z: _mbls_reference(z, LABELS, 10.0, 0.1)),
    ("mbls", {"margin": 1.0, "lam": 0.5}, lambda z: _mbls_reference(z, LABELS, 1.0, 0.5)),
    ("logit_norm", {}, lambda z: _logit_norm_reference(z, LABELS, 0.04)),
    ("logit_norm", {"temperature": 0.5}, lambda z: _logit_norm_reference(z, LABELS, 0.5)),
    ("mdca", {}, lambda z: _nll_reference(z, LABELS) + _mdca_reference(z, LABELS)),
    (
        "mdca",
        {"beta": 5.0},
        lambda z: _nll_reference(z, LABELS) + 5.0 * _mdca_reference(z, LABELS),
    ),
    (
        "composite",
        {"primary": {"name": "focal", "gamma": 1.0}, "secondary": "mdca", "beta": 1.0},
        lambda z: _focal_reference(z, LABELS, 1.0) + _mdca_reference(z, LABELS),
    ),
    (
        "composite",
        {"primary": {"name": "label_smoothing", "epsilon": 0.1}, "secondary": "mdca", "beta": 2},
        lambda z: _label_smoothing_reference(z, LABELS, 0.1) + 2.0 * _mdca_reference(z, LABELS),
    ),
]
CASE_IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(CASES)]


@pytest.mark.parametrize(("name", "params", "reference"), CASES, ids=CASE_IDS)
def test_value_and_gradient_match_the_papers_equation(name, params, reference):
    logits = torch.tensor(LOGITS, requires_grad=True)
    loss = build_objective(name, **params)(logits, torch.from_numpy(LABELS))
    loss.backward()
    assert loss.item() == pytest.approx(reference(LOGITS), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(
        logits.grad.numpy(), _numeric_gradient(reference, LOGITS), rtol=1e-6, atol=1e-8
    )


def test_dual_focal_hand_computed_on_one_sample():
    # p = (0.5, 0.3, 0.2), label 1: p_y = 0.3, p_j = 0.2 (ranked right after the target,
    # not the largest other class 0.5): -(1 - 0.3 + 0.2)^2 log 0.3
    logits = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64).log()
    value = build_objective("dual_focal", gamma=2.0)(logits, torch.tensor([1]))
    assert value.item() == pytest.approx(-(0.9**2) * math.log(0.3))


def test_dual_focal_is_focal_where_the_target_ranks_last():
    logits = torch.tensor([[2.0, 1.0, -1.0], [0.0, 3.0, -2.0]], dtype=torch.float64)
    labels = torch.tensor([2, 2])
    dual = build_objective("dual_focal", gamma=3.0)(logits, labels)
    torch.testing.assert_close(dual, build_objective("focal", gamma=3.0)(logits, labels))


def test_dual_focal_skips_classes_tied_with_the_target():
    # p_1 == p_0 = target: p_j is the next strictly smaller probability, p_2
    probs = torch.tensor([[0.4, 0.4, 0.15, 0.05]], dtype=torch.float64)
    value = build_objective("dual_focal", gamma=1.0)(probs.log(), torch.tensor([0]))
    assert value.item() == pytest.approx(-(1 - 0.4 + 0.15) * math.log(0.4))


def test_dual_focal_soft_targets_apply_the_rule_per_class():
    logits = torch.tensor(LOGITS[:2])
    targets = torch.tensor([[0.7, 0.0, 0.3, 0.0], [0.0, 0.5, 0.0, 0.5]], dtype=torch.float64)
    objective = build_objective("dual_focal", gamma=2.0)
    expected = 0.0
    for i, row in enumerate(LOGITS[:2]):
        for k in range(4):
            if targets[i, k] > 0:
                one = _dual_focal_reference(row[None], np.array([k]), 2.0)
                expected += float(targets[i, k]) * one / 2
    assert objective(logits, targets).item() == pytest.approx(expected)


def test_mbls_equals_cross_entropy_when_no_distance_exceeds_the_margin():
    logits = torch.tensor(LOGITS)
    labels = torch.from_numpy(LABELS)
    torch.testing.assert_close(
        build_objective("mbls", margin=10.0, lam=5.0)(logits, labels),
        F.cross_entropy(logits, labels),
    )


def test_logit_norm_ignores_the_logits_scale():
    logits, labels = torch.tensor(LOGITS), torch.from_numpy(LABELS)
    objective = build_objective("logit_norm", temperature=0.1)
    torch.testing.assert_close(objective(7.5 * logits, labels), objective(logits, labels))
    zero = torch.zeros(2, 4, requires_grad=True)
    loss = objective(zero, torch.tensor([0, 1]))
    loss.backward()
    assert loss.item() == pytest.approx(math.log(4)) and torch.isfinite(zero.grad).all()


def test_mdca_is_zero_when_mean_probabilities_equal_class_frequencies():
    # uniform predictions on a batch whose labels are uniform over the classes
    logits = torch.zeros(4, 4, dtype=torch.float64)
    labels = torch.arange(4)
    value = build_objective("composite", secondary="mdca", beta=3.0)(logits, labels)
    torch.testing.assert_close(value, F.cross_entropy(logits, labels))


def test_defaults_are_the_authors_values():
    assert build_objective("dual_focal").hyperparameters == {"gamma": 5.0}
    assert build_objective("mbls").hyperparameters == {"margin": 10.0, "lam": 0.1}
    assert build_objective("logit_norm").hyperparameters == {"temperature": 0.04}
    assert build_objective("mdca").hyperparameters == {"beta": 1.0}
    composite = build_objective("composite", primary="label_smoothing", secondary="mdca")
    assert composite.hyperparameters["primary"] == {"name": "label_smoothing", "epsilon": 0.05}


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("dual_focal", {"gamma": -1.0}, r"gamma must be in \[0.0, inf\), got -1.0"),
        ("dual_focal", {"gamma": float("inf")}, "gamma must be a finite number"),
        ("dual_focal", {"detach_pt": True}, r"unknown parameter\(s\) \['detach_pt'\]"),
        ("mbls", {"margin": -1.0}, r"margin must be in \[0.0, inf\), got -1.0"),
        ("mbls", {"lam": -0.1}, r"lam must be in \[0.0, inf\), got -0.1"),
        ("mbls", {"alpha": 0.1}, r"unknown parameter\(s\) \['alpha'\]"),
        ("logit_norm", {"temperature": 0.0}, r"temperature must be in \(0.0, inf\), got 0.0"),
        ("logit_norm", {"temperature": "cold"}, "temperature must be a number"),
        ("mdca", {"beta": -1.0}, r"beta must be in \[0.0, inf\), got -1.0"),
        (
            "composite",
            {"primary": {"name": "label_smoothing", "epsilon": 1.0}},
            r"epsilon must be in \[0.0, 1.0\), got 1.0",
        ),
        ("composite", {"secondary": {"name": "mdca", "beta": 1.0}}, "unknown parameter"),
    ],
)
def test_bad_hyperparameters_are_rejected_at_build_time(name, params, message):
    with pytest.raises(ValueError, match=message):
        build_objective(name, **params)

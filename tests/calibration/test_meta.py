"""Tests of calibration.meta: γ-Net, the look-ahead meta step, baselines, state, validation."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from calib_pipeline.calibration.losses import focal_loss
from calib_pipeline.calibration.meta import (
    GammaNet,
    batch_statistics_without_update,
    build_meta_learner,
    meta_learner_names,
)
from calib_pipeline.models import build_model
from calib_pipeline.models.registry import ClassifierNet

NUM_CLASSES = 4
FEATURE_DIM = 6


class TinyNet(ClassifierNet):
    """Linear → BatchNorm → tanh features and a linear head: small enough for float64 FD."""

    def __init__(self, in_features: int = 5) -> None:
        super().__init__(FEATURE_DIM, NUM_CLASSES)
        self.body = nn.Sequential(
            nn.Linear(in_features, FEATURE_DIM), nn.BatchNorm1d(FEATURE_DIM), nn.Tanh()
        )

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def batches(seed: int, n: int = 24, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g, dtype=dtype)
    xv = torch.randn(n, 5, generator=g, dtype=dtype)
    return (
        x,
        torch.randint(0, NUM_CLASSES, (n,), generator=g),
        xv,
        torch.randint(0, NUM_CLASSES, (n,), generator=g),
    )


def tiny_setup(name: str, *, seed: int = 0, frozen_backbone: bool = False, **hp):
    torch.manual_seed(seed)
    model = TinyNet().double().train()
    # Scale the head up so the softmax is far from uniform and the calibration terms vary.
    with torch.no_grad():
        model.head.weight.mul_(4.0)
    if frozen_backbone:
        model.body.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=0.3, momentum=0.9, weight_decay=5e-4)
    learner = build_meta_learner(name, num_classes=NUM_CLASSES, feature_dim=FEATURE_DIM, **hp).to(
        torch.float64
    )
    return model, optimizer, learner


# -- γ-Net --------------------------------------------------------------------------------------


def test_gamma_net_shapes_positive_and_one_at_init():
    torch.manual_seed(0)
    net = GammaNet(32, 10)
    features = 3.0 * torch.randn(50, 32).relu()
    gamma = net(features)
    assert gamma.shape == (50,)
    torch.testing.assert_close(gamma, torch.ones(50), atol=1e-5, rtol=0)


def test_gamma_net_follows_eq_3_4_and_stays_positive_after_updates():
    torch.manual_seed(1)
    net = GammaNet(8, 3, tau=0.05)
    with torch.no_grad():  # head values AᵀW of both signs: x̃W takes both signs across samples
        net.attention.normal_()
        net.projection.copy_(torch.linalg.pinv(net.attention.T) @ torch.tensor([1.0, -1.0, 0.5]))
    x = 3.0 * torch.randn(40, 8)
    a = x @ net.attention
    x_tilde = torch.softmax(a, dim=1) @ net.attention.T
    expected = (x_tilde @ net.projection).abs() / 0.05
    signed = x_tilde @ net.projection
    assert (signed < 0).any() and (signed > 0).any()
    torch.testing.assert_close(net(x), expected)
    assert (net(x) >= 0).all()


@pytest.mark.parametrize(
    ("feature_dim", "num_classes"),
    [(1, 5), (4, 10), (16, 200), (128, 200), (100, 100), (32, 10), (512, 100), (2048, 10)],
)
def test_gamma_net_starts_at_one_for_every_shape(feature_dim, num_classes):
    # fewer features than classes (small_cnn on Tiny-ImageNet), square, and more
    torch.manual_seed(2)
    net = GammaNet(feature_dim, num_classes)
    # the proof: every head value c = AᵀW is τ exactly (in float32), so γ = |Σ_j p_j τ|/τ = 1
    assert torch.equal(net.attention.T @ net.projection, torch.full((num_classes,), 0.01))
    # what is left is the rounding of the softmax's Σ_j p_j = 1, on features of any scale
    for scale in (0.1, 3.0, 30.0):
        features = scale * torch.randn(64, feature_dim)
        torch.testing.assert_close(net(features), torch.ones(64), atol=1e-6, rtol=0)
    # the attention itself stays sample-dependent (a constant row only shifts the logits)
    attention = torch.softmax(features @ net.attention, dim=1)
    assert feature_dim == 1 or (attention.std(dim=0) > 1e-3).any()


def test_learner_gamma_for_focal_learners_and_none_for_ce_baselines():
    features = torch.randn(7, FEATURE_DIM)
    for name in meta_learner_names():
        learner = build_meta_learner(name, num_classes=NUM_CLASSES, feature_dim=FEATURE_DIM)
        gamma = learner.gamma(features)
        if name.startswith("fl_gamma"):
            assert gamma.shape == (7,) and not gamma.requires_grad
            torch.testing.assert_close(gamma, torch.ones(7), atol=1e-5, rtol=0)
        else:
            assert gamma is None


# -- the look-ahead hypergradient ---------------------------------------------------------------


def meta_loss_after_step(model, optimizer, learner, batch) -> torch.Tensor:
    """J(φ): the meta loss after a real backbone step taken with the learner's φ."""
    model, optimizer, learner = copy.deepcopy((model, optimizer, learner))
    return learner.step(model, optimizer, *batch)["meta_loss"]


@pytest.mark.parametrize(
    ("name", "unroll", "frozen_backbone"),
    [
        ("fl_gamma_sece", "full", False),
        ("fl_gamma_dece", "full", False),
        ("fl_gamma_sece", "last_layer", True),
        ("fl_gamma_dece", "last_layer", True),
        ("ce_dece", "last_layer", True),
        ("ce_sece", "full", False),
    ],
)
def test_meta_gradient_matches_finite_difference_of_real_step(name, unroll, frozen_backbone):
    """With SGD (momentum, weight decay) the look-ahead gradient is the exact derivative of
    'take the backbone step with φ, then evaluate the meta loss' (for last_layer when only
    the head trains; otherwise the backbone's dependence on φ is truncated by design)."""
    model, optimizer, learner = tiny_setup(name, unroll=unroll, frozen_backbone=frozen_backbone)
    learner.step(model, optimizer, *batches(10))  # fills the momentum buffer, moves φ off init
    if name.startswith("ce_"):  # move λ off the clamp boundary so ±ε stays in the smooth region
        with torch.no_grad():
            for p in learner.parameters():
                p.add_(0.05)
    batch = batches(11)
    reference = copy.deepcopy((model, optimizer, learner))
    learner.step(model, optimizer, *batch)
    analytic = [p.grad.clone() for p in learner.parameters()]

    g = torch.Generator().manual_seed(3)
    direction = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in learner.parameters()]
    eps = 1e-6
    values = []
    for sign in (1.0, -1.0):
        model0, optimizer0, learner0 = copy.deepcopy(reference)
        with torch.no_grad():
            for p, v in zip(learner0.parameters(), direction):
                p.add_(sign * eps * v)
        values.append(meta_loss_after_step(model0, optimizer0, learner0, batch))
    numeric = (values[0] - values[1]) / (2 * eps)
    directional = sum((a * v).sum() for a, v in zip(analytic, direction))
    assert directional.abs() > 1e-6, "the look-ahead must give the learner a gradient"
    torch.testing.assert_close(directional, numeric, rtol=1e-4, atol=1e-9)


def test_last_layer_and_full_unroll_differ_when_the_backbone_trains():
    grads = {}
    for unroll in ("last_layer", "full"):
        model, optimizer, learner = tiny_setup("fl_gamma_sece", unroll=unroll)
        learner.step(model, optimizer, *batches(20))
        grads[unroll] = torch.cat([p.grad.flatten() for p in learner.parameters()])
    assert grads["last_layer"].abs().sum() > 0
    assert not torch.allclose(grads["last_layer"], grads["full"])


# -- the backbone update and BatchNorm ----------------------------------------------------------


def test_backbone_update_is_a_focal_step_with_gamma_from_gamma_net():
    model, optimizer, learner = tiny_setup("fl_gamma_sece", detach_pt=True)
    x, y, xv, yv = batches(30)
    manual_model, manual_optimizer = copy.deepcopy((model, optimizer))
    gamma = learner.gamma(manual_model.forward_features(x).detach())
    manual_model.load_state_dict(model.state_dict())  # undo the BN update of that forward
    loss = focal_loss(manual_model(x), y, gamma, detach_pt=True)
    manual_optimizer.zero_grad()
    loss.backward()
    manual_optimizer.step()

    out = learner.step(model, optimizer, x, y, xv, yv)
    torch.testing.assert_close(out["loss"], loss.detach())
    for (name, p), q in zip(model.state_dict().items(), manual_model.state_dict().values()):
        torch.testing.assert_close(p, q, msg=name)


def test_meta_pass_leaves_batchnorm_running_statistics_to_the_train_batch():
    torch.manual_seed(0)
    model = build_model("small_cnn", in_channels=1, num_classes=NUM_CLASSES, image_size=8, width=4,
                        feature_dim=FEATURE_DIM).train()  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, xv = torch.randn(16, 1, 8, 8), 5.0 + torch.randn(16, 1, 8, 8)
    y, yv = torch.randint(0, NUM_CLASSES, (16,)), torch.randint(0, NUM_CLASSES, (16,))
    plain = copy.deepcopy(model)
    plain(x)  # a plain training forward on the train batch only
    for unroll in ("last_layer", "full"):
        stepped = copy.deepcopy(model)
        learner = build_meta_learner(
            "fl_gamma_sece", num_classes=NUM_CLASSES, feature_dim=FEATURE_DIM, unroll=unroll
        )
        out = learner.step(stepped, torch.optim.SGD(stepped.parameters(), lr=0.1), x, y, xv, yv)
        for name, buffer in plain.named_buffers():
            torch.testing.assert_close(dict(stepped.named_buffers())[name], buffer, msg=name)
        assert all(
            m.track_running_stats for m in stepped.modules() if hasattr(m, "track_running_stats")
        )
        # the reported meta loss is the objective at θ_{t+1} with batch-statistics BN
        with torch.no_grad(), batch_statistics_without_update(stepped):
            expected = learner.objective(stepped(xv), yv)["meta_loss"]
        torch.testing.assert_close(out["meta_loss"], expected, rtol=1e-5, atol=1e-6)
    assert optimizer.state == {}  # the original model/optimizer were never touched


def test_step_reports_detached_scalars():
    model, optimizer, learner = tiny_setup("fl_gamma_sece")
    out = learner.step(model, optimizer, *batches(40))
    assert {"loss", "meta_loss", "meta_calibration", "gamma_mean", "gamma_std"} <= out.keys()
    assert all(v.ndim == 0 and not v.requires_grad and torch.isfinite(v) for v in out.values())
    model, optimizer, learner = tiny_setup("ce_dece")
    out = learner.step(model, optimizer, *batches(40))
    assert {"loss", "meta_loss", "meta_ce", "meta_calibration", "penalty"} <= out.keys()


def test_unitwise_l2_coefficients_stay_non_negative():
    model, optimizer, learner = tiny_setup("ce_dece", meta_lr=0.5)
    for seed in range(5):
        learner.step(model, optimizer, *batches(seed))
    coefficients = torch.cat([p.flatten() for p in learner.parameters()])
    assert (coefficients >= 0).all() and (coefficients > 0).any()


def test_gradient_clipping_bounds_the_backbone_step():
    model, _, learner = tiny_setup("fl_gamma_sece", max_grad_norm=1e-3)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    learner.step(model, optimizer, *batches(50))
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert 0 < (after - before).norm() <= 1e-3 * (1 + 1e-4)


def test_features_not_detached_lets_the_backbone_train_through_gamma():
    # At initialisation γ ≡ 1 does not depend on the features, so the γ path only opens
    # once γ-Net has moved: compare the second step.
    updates = {}
    for detach in (True, False):
        model, optimizer, learner = tiny_setup("fl_gamma_sece", detach_features=detach)
        learner.step(model, optimizer, *batches(59))
        learner.step(model, optimizer, *batches(60))
        updates[detach] = model.body[0].weight.detach().clone()
        assert any(p.grad.abs().sum() > 0 for p in learner.parameters())
    assert not torch.allclose(updates[True], updates[False])


def test_head_outside_the_optimizer_is_rejected():
    model, _, learner = tiny_setup("fl_gamma_sece")
    optimizer = torch.optim.SGD(model.body.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="head"):
        learner.step(model, optimizer, *batches(0))


# -- determinism, state and resume --------------------------------------------------------------


def small_cnn_setup(name: str, seed: int):
    torch.manual_seed(seed)
    model = build_model("small_cnn", in_channels=1, num_classes=NUM_CLASSES, image_size=8, width=4,
                        feature_dim=FEATURE_DIM).train()  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    learner = build_meta_learner(name, num_classes=NUM_CLASSES, feature_dim=FEATURE_DIM)
    return model, optimizer, learner


def image_batches(count: int) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(123)
    return [
        (torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, NUM_CLASSES, (16,), generator=g),
         torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, NUM_CLASSES, (16,), generator=g))
        for _ in range(count)
    ]  # fmt: skip


def run(model, optimizer, learner, data) -> list[dict[str, torch.Tensor]]:
    return [learner.step(model, optimizer, *batch) for batch in data]


def assert_same_state(a, b):
    (model_a, _, learner_a), (model_b, _, learner_b) = a, b
    for x, y in zip([*model_a.state_dict().values(), *learner_a.parameters()],
                    [*model_b.state_dict().values(), *learner_b.parameters()]):  # fmt: skip
        assert torch.equal(x, y)


def test_step_is_deterministic_given_seeds():
    data = image_batches(3)
    first, second = small_cnn_setup("fl_gamma_sece", 7), small_cnn_setup("fl_gamma_sece", 7)
    outs = run(*first, data), run(*second, data)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(*outs) for k in a)
    assert_same_state(first, second)


@pytest.mark.parametrize("name", ["fl_gamma_sece", "ce_dece"])
def test_state_dict_round_trip_resumes_identically(name):
    data = image_batches(5)
    uninterrupted = small_cnn_setup(name, 1)
    run(*uninterrupted, data[:2])
    buffer = io.BytesIO()
    model, optimizer, learner = uninterrupted
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
         "learner": learner.state_dict()},
        buffer,
    )  # fmt: skip
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)

    resumed = small_cnn_setup(name, 99)  # different initialisation, then overwritten
    resumed[0].load_state_dict(checkpoint["model"])
    resumed[1].load_state_dict(checkpoint["optimizer"])
    resumed[2].load_state_dict(checkpoint["learner"])
    outs = run(*uninterrupted, data[2:]), run(*resumed, data[2:])
    assert all(torch.equal(a[k], b[k]) for a, b in zip(*outs) for k in a)
    assert_same_state(uninterrupted, resumed)


def test_load_state_dict_rejects_other_learners_and_configurations():
    state = build_meta_learner("fl_gamma_sece", num_classes=3, feature_dim=4).state_dict()
    with pytest.raises(ValueError, match="fl_gamma_sece"):
        build_meta_learner("fl_gamma_dece", num_classes=3, feature_dim=4).load_state_dict(state)
    with pytest.raises(ValueError, match="bandwidth"):
        build_meta_learner(
            "fl_gamma_sece", num_classes=3, feature_dim=4, bandwidth=0.05
        ).load_state_dict(state)


def test_to_moves_parameters_and_adam_state():
    model, optimizer, learner = tiny_setup("fl_gamma_sece")
    learner.to(torch.float32)
    learner.step(model.float(), optimizer, *[t.float() if t.is_floating_point() else t
                                             for t in batches(0)])  # fmt: skip
    learner.to(torch.float64)
    moments = [s["exp_avg"] for s in learner.meta_optimizer.state.values()]
    assert moments and all(m.dtype == torch.float64 for m in moments)
    learner.step(model.double(), optimizer, *batches(1))


# -- registry and validation --------------------------------------------------------------------


def test_registry_names_and_defaults():
    assert meta_learner_names() == [
        "ce_dece",
        "ce_sece",
        "fl_gamma",
        "fl_gamma_dece",
        "fl_gamma_sece",
    ]
    learner = build_meta_learner("fl_gamma_sece", num_classes=10, feature_dim=512)
    assert learner.name == "fl_gamma_sece"
    assert learner.hyperparameters == {
        "meta_lr": 1e-3, "unroll": "last_layer", "max_grad_norm": None, "meta_ce_weight": 0.0,
        "meta_loss_weight": 1.0, "tau": 0.01, "detach_features": True, "detach_pt": False,
        "bandwidth": 0.01, "tau_a": 100.0,
    }  # fmt: skip
    assert build_meta_learner("ce_dece", num_classes=10, feature_dim=8).hyperparameters[
        "meta_loss_weight"] == 0.5  # fmt: skip


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("nope", {}, "valid meta learner names are: ce_dece"),
        ("fl_gamma_sece", {"n_bins": 15}, "unknown parameter"),
        ("fl_gamma", {"bandwidth": 0.01}, "unknown parameter"),
        ("ce_dece", {"tau": 0.01}, "unknown parameter"),
        ("fl_gamma_sece", {"meta_lr": -1e-3}, "meta_lr"),
        ("fl_gamma_sece", {"tau": 0.0}, "tau"),
        ("fl_gamma_sece", {"bandwidth": 0.0}, "bandwidth"),
        ("ce_sece", {"tau_a": 0.0}, "tau_a"),
        ("fl_gamma_sece", {"unroll": "first_layer"}, "unroll must be one of 'last_layer', 'full'"),
        ("fl_gamma_sece", {"detach_features": "yes"}, "detach_features"),
        ("fl_gamma_sece", {"detach_pt": 1}, "detach_pt"),
        ("fl_gamma_sece", {"meta_loss_weight": -0.5}, "meta_loss_weight"),
        ("fl_gamma_sece", {"meta_loss_weight": 0.0}, "meta loss is empty"),
        ("fl_gamma_sece", {"max_grad_norm": 0.0}, "max_grad_norm"),
        ("fl_gamma_dece", {"n_bins": 0}, "n_bins"),
        ("fl_gamma_dece", {"n_bins": 2.5}, "n_bins"),
        ("ce_dece", {"tau_a": -1.0}, "tau_a"),
        ("ce_dece", {"tau_b": float("nan")}, "tau_b"),
        ("fl_gamma", {"meta_ce_weight": 0.0}, "meta loss is empty"),
        ("fl_gamma_sece", {"tau": float("inf")}, "tau must be a finite number"),
        ("fl_gamma_sece", {"meta_lr": float("inf")}, "meta_lr must be a finite number"),
        ("fl_gamma_sece", {"meta_loss_weight": True}, "meta_loss_weight must be a number"),
    ],
)
def test_invalid_hyperparameters_are_rejected_at_build_time(name, params, message):
    with pytest.raises(ValueError, match=message):
        build_meta_learner(name, num_classes=10, feature_dim=16, **params)


@pytest.mark.parametrize(("num_classes", "feature_dim"), [(1, 16), (10, 0), (10, 16.0)])
def test_invalid_dimensions_are_rejected(num_classes, feature_dim):
    with pytest.raises(ValueError, match=r"num_classes|feature_dim"):
        build_meta_learner("fl_gamma_sece", num_classes=num_classes, feature_dim=feature_dim)

"""Tests of calibration.methods: the method spec, build_method, the objective learner's step."""

from __future__ import annotations

import copy

import pytest
import torch

from calib_pipeline.calibration.losses import build_objective
from calib_pipeline.calibration.methods import (
    MethodSpec,
    ObjectiveLearner,
    build_method,
    check_method,
)
from calib_pipeline.models import build_model
from calib_pipeline.training import accelerate


def test_an_objective_method_builds_a_learner_around_its_objective():
    learner = build_method(MethodSpec(key="fl", objective="focal", params={"gamma": 2.0}), 10, 16)
    assert isinstance(learner, ObjectiveLearner)
    assert learner.objective.name == "focal"
    assert learner.objective.hyperparameters["gamma"] == 2.0
    assert learner.state_dict() == {}
    assert learner.gamma(torch.zeros(3, 16)) is None


def test_a_meta_learner_method_builds_the_meta_learner_for_the_backbone():
    spec = MethodSpec(key="fl_gamma", meta_learner="fl_gamma_sece", params={"meta_lr": 0.01})
    learner = build_method(spec, num_classes=10, feature_dim=16)
    assert not isinstance(learner, ObjectiveLearner)
    assert learner.name == "fl_gamma_sece" and learner.hyperparameters["meta_lr"] == 0.01
    assert learner.gamma(torch.zeros(3, 16)).shape == (3,)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            MethodSpec(key="x", objective="nope"),
            "unknown objective 'nope'; valid objective names are: .*cross_entropy",
        ),
        (
            MethodSpec(key="x", meta_learner="nope"),
            "unknown meta learner 'nope'; valid meta learner names are: .*fl_gamma_sece",
        ),
        (MethodSpec(key="x", objective="focal", params={"gamma": -1.0}), "gamma"),
    ],
)
def test_unknown_names_and_bad_hyperparameters_fail_with_the_valid_choices(spec, message):
    with pytest.raises(ValueError, match=message):
        build_method(spec, num_classes=10, feature_dim=16)
    with pytest.raises(ValueError, match="method 'x': " + message):
        check_method(spec)


def test_a_method_has_exactly_one_of_objective_or_meta_learner():
    for kinds in ({}, {"objective": "cross_entropy", "meta_learner": "fl_gamma_sece"}):
        with pytest.raises(
            ValueError, match="method 'x' needs exactly one of 'objective' or 'meta_learner'"
        ):
            MethodSpec(key="x", **kinds)
    spec = MethodSpec(key="ce", objective="cross_entropy")
    assert (spec.label, spec.group) == ("ce", "ce")


def test_an_objective_learner_accepts_only_an_empty_state():
    learner = ObjectiveLearner(build_objective("cross_entropy"))
    learner.load_state_dict({})
    with pytest.raises(ValueError, match="no state to load"):
        learner.load_state_dict({"module": {}})


def _hand_written_step(model, optimizer, objective, inputs, targets, generator, grad_clip):
    """The engine's step for a plain objective before learners existed."""
    if hasattr(objective, "mix_batch"):
        inputs, targets = objective.mix_batch(inputs, targets, generator)
    logits = model(inputs)
    loss = objective(logits.float(), targets, model=model)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss


@pytest.mark.parametrize(
    ("name", "params", "grad_clip"),
    [("cross_entropy", {}, None), ("mixup", {"alpha": 0.4}, None), ("mmce", {"lam": 2.0}, 0.05)],
)
def test_the_objective_learner_step_is_the_plain_training_step(name, params, grad_clip):
    torch.manual_seed(0)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=4, image_size=8, width=4, feature_dim=8
    )
    twin = copy.deepcopy(model)
    inputs, targets = torch.randn(16, 1, 8, 8), torch.arange(16) % 4
    objective = build_objective(name, **params)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    expected = _hand_written_step(
        model, optimizer, objective, inputs, targets, torch.Generator().manual_seed(7), grad_clip
    )
    learner = ObjectiveLearner(
        objective, generator=torch.Generator().manual_seed(7), grad_clip=grad_clip
    )
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    stats = learner.step(twin, twin_optimizer, inputs, targets, None, None)

    assert torch.equal(stats["loss"], expected.detach())
    if name == "mixup":  # logits of mixed inputs have no label to be scored against
        assert "logits" not in stats
    else:
        assert stats["logits"].shape == (16, 4) and not stats["logits"].requires_grad
    for (key, value), twin_value in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(value, twin_value), key


class _ContextRecorder:
    """An objective that reads the step's context: cross-entropy plus 0 x the features' sum,
    recording what it received."""

    name = "context_recorder"

    def __init__(self, uses_features):
        self.uses_features = uses_features
        self.received = []

    def __call__(self, logits, targets, **context):
        self.received.append(context)
        loss = torch.nn.functional.cross_entropy(logits, targets)
        features = context.get("features")
        return loss if features is None else loss + 0.0 * features.sum()


@pytest.mark.parametrize("uses_features", [False, True])
def test_an_objective_receives_the_model_the_epoch_and_on_request_the_features(uses_features):
    """DESIGN §2: the call may carry batch context. ``epoch`` comes from the engine, the
    features are the penultimate ones whose head gives the logits it is scored on."""
    torch.manual_seed(0)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=4, image_size=8, width=4, feature_dim=8
    )
    inputs, targets = torch.randn(16, 1, 8, 8), torch.arange(16) % 4
    objective = _ContextRecorder(uses_features)
    learner = ObjectiveLearner(objective)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the model stays as it was
    stats = learner.step(model, optimizer, inputs, targets, None, None, epoch=7)

    (context,) = objective.received
    assert context["model"] is model and context["epoch"] == 7
    assert ("features" in context) is uses_features
    with torch.no_grad():
        features = model.forward_features(inputs)
        assert torch.equal(stats["logits"], model.head(features))
    if uses_features:
        assert torch.equal(context["features"].detach(), features)
        assert context["features"].requires_grad  # a feature term trains the backbone
        reason = accelerate.compile_reason(learner)
        assert reason is not None and "penultimate features" in reason
    else:
        assert accelerate.compile_reason(learner) is None

"""The engine and objectives that adapt on the val split (AdaFocal, CALS): they receive the
val split -- never the test split -- once per epoch, report their update in the history,
checkpoint their state and resume to the uninterrupted run's numbers; the run's provenance
records that the method read the val split."""

from __future__ import annotations

import pytest
import torch

from calib_pipeline.calibration._losses_adaptive import ValidationAdaptiveObjective
from calib_pipeline.calibration.losses import build_objective
from calib_pipeline.calibration.methods import MethodSpec, ObjectiveLearner
from calib_pipeline.data import load_dataset
from calib_pipeline.data.splits import split_dataset
from calib_pipeline.models import build_model
from calib_pipeline.training import CheckpointStore, Split, TrainConfig, train_model, train_run
from calib_pipeline.training.predict import checkpoint_logits

CONFIG = TrainConfig(epochs=3, batch_size=64, lr=0.05, device="cpu", milestones=(2,))


@pytest.fixture(scope="module")
def digits():
    data = load_dataset("digits")
    train = Split(data.train_images[:600], data.train_labels[:600])
    val = Split(data.train_images[600:750], data.train_labels[600:750])
    test = Split(data.test_images, data.test_labels)
    return data, train, val, test


def _train(digits, objective, *, store=None, stop_after_epoch=None):
    data, train, val, test = digits
    torch.manual_seed(1)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=32
    )
    return train_model(
        model,
        ObjectiveLearner(objective),
        train,
        val,
        CONFIG,
        normalization=(data.mean, data.std),
        seed=5,
        test=test,
        store=store,
        fingerprint="adaptive",
        stop_after_epoch=stop_after_epoch,
    )


class _RecordingObjective(ValidationAdaptiveObjective):
    """Cross-entropy that records what the engine hands its validation update."""

    validation_feedback = "records the val split"

    def __init__(self) -> None:
        super().__init__("recording", {})
        self.seen: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def _tensors(self) -> dict[str, torch.Tensor | None]:
        return {}

    def __call__(self, logits, targets, **context):
        return torch.nn.functional.cross_entropy(logits, targets)

    def observe_validation(self, logits, labels, *, epoch):
        self.seen.append((epoch, logits.clone(), labels.clone()))
        return {"recorded_rows": torch.tensor(float(len(labels)))}


def test_the_engine_hands_the_val_split_and_never_the_test_split(digits):
    _, _, val, test = digits
    objective = _RecordingObjective()
    result = _train(digits, objective)
    assert [epoch for epoch, _, _ in objective.seen] == [1, 2, 3]
    for _, logits, labels in objective.seen:
        assert logits.shape == (len(val.labels), 10) != (len(test.labels), 10)
        assert torch.equal(labels, val.labels)
    # the logits are the epoch's val logits, those the history scores
    last_logits = objective.seen[-1][1]
    nll = torch.nn.functional.cross_entropy(last_logits.double(), val.labels.long())
    assert result.history[-1]["val_nll"] == pytest.approx(float(nll), rel=1e-6)
    assert [row["recorded_rows"] for row in result.history] == [len(val.labels)] * 3


@pytest.mark.parametrize(
    ("name", "column"), [("adafocal", "adafocal_gamma_bin14"), ("cals", "cals_lambda_mean")]
)
def test_an_adaptive_run_resumes_to_the_uninterrupted_runs_state(digits, tmp_path, name, column):
    full = _train(digits, build_objective(name))
    assert all(column in row for row in full.history)
    store = CheckpointStore(tmp_path / name)
    _train(digits, build_objective(name), store=store, stop_after_epoch=1)
    saved = store.load()["learner"]
    assert saved["name"] == name, "the adapted state is checkpointed with the run"
    resumed = _train(digits, build_objective(name), store=store)
    for key, value in full.state_dict.items():
        assert torch.equal(value, resumed.state_dict[key]), key
    for key, value in full.meta_state.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, resumed.meta_state[key]), key
    timeless = [
        [{k: v for k, v in row.items() if k != "seconds"} for row in run.history]
        for run in (full, resumed)
    ]
    assert timeless[0] == timeless[1]
    # the state moved from its start: the second epoch trained with what the first adapted
    fresh = build_objective(name).state_dict()
    adapted = "gammas" if name == "adafocal" else "multipliers"
    assert fresh[adapted] is None or not torch.equal(full.meta_state[adapted], fresh[adapted])


def test_an_adaptive_state_is_not_resumed_into_another_configuration(digits, tmp_path):
    store = CheckpointStore(tmp_path / "run")
    _train(digits, build_objective("adafocal"), store=store, stop_after_epoch=1)
    other = _train(digits, build_objective("adafocal", lam=2.0), store=store)
    assert other.resumed_after_epoch == 0, "other hyperparameters: a fresh training"


@pytest.mark.parametrize("name", ["adafocal", "cals"])
def test_a_trained_run_records_that_it_read_the_val_split(tmp_path, name):
    data = load_dataset("digits")
    definition = {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}
    checkpoint, history = train_run(
        data,
        split_dataset(data, definition),
        definition,
        CheckpointStore(tmp_path / "resume"),
        method=MethodSpec(key=name, objective=name),
        seed=0,
        model_params={"name": "small_cnn", "params": {"width": 4, "feature_dim": 8}},
        training_params={"epochs": 1, "batch_size": 256, "device": "cpu"},
        run_id="test",
        env="test",
        protocol="test",
    )
    assert "val split" in checkpoint["provenance"]["validation_feedback"]
    assert any(column.startswith(f"{name}_") for column in history.columns)
    assert checkpoint["meta_state"]["name"] == name
    logits = checkpoint_logits(data, split_dataset(data, definition), checkpoint, device="cpu")
    assert "gamma_val" not in logits, "an adaptive objective has no per-sample γ of features"


def test_a_plain_run_records_no_validation_feedback(tmp_path):
    data = load_dataset("digits")
    definition = {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}
    checkpoint, _ = train_run(
        data,
        split_dataset(data, definition),
        definition,
        CheckpointStore(tmp_path / "resume"),
        method=MethodSpec(key="ce", objective="cross_entropy"),
        seed=0,
        model_params={"name": "small_cnn", "params": {"width": 4, "feature_dim": 8}},
        training_params={"epochs": 1, "batch_size": 256, "device": "cpu"},
        run_id="test",
        env="test",
        protocol="test",
    )
    assert "validation_feedback" not in checkpoint["provenance"]
    assert checkpoint["meta_state"] is None

import dataclasses
import logging
import math
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F

from calib_pipeline.calibration.losses import build_objective
from calib_pipeline.calibration.methods import ObjectiveLearner
from calib_pipeline.data import load_dataset
from calib_pipeline.models import build_model
from calib_pipeline.training import (
    BatchStream,
    CheckpointStore,
    Split,
    TrainConfig,
    augment_batch,
    train_model,
)


@pytest.fixture(scope="module")
def digits():
    data = load_dataset("digits")
    train = Split(data.train_images[:600], data.train_labels[:600])
    val = Split(data.train_images[600:800], data.train_labels[600:800])
    test = Split(data.test_images, data.test_labels)
    return data, train, val, test


def _train(digits, config, store=None, stop_after_epoch=None, objective="cross_entropy"):
    data, train, val, test = digits
    torch.manual_seed(1)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=32
    )
    return train_model(
        model,
        ObjectiveLearner(build_objective(objective)),
        train,
        val,
        config,
        normalization=(data.mean, data.std),
        seed=5,
        test=test,
        store=store,
        fingerprint="fp",
        stop_after_epoch=stop_after_epoch,
        description="test",
    )


def test_training_learns_and_records_history(digits):
    config = TrainConfig(epochs=4, batch_size=32, lr=0.1, milestones=(3,), device="cpu")
    result = _train(digits, config)
    assert [row["epoch"] for row in result.history] == [1, 2, 3, 4]
    assert result.history[-1]["val_accuracy"] > 0.7
    assert result.history[-1]["lr"] == pytest.approx(0.01)
    for key in (
        "train_loss",
        "val_nll",
        "val_ece",
        "test_nll_correct",
        "test_entropy_incorrect",
        "head_weight_norm",
    ):
        assert key in result.history[-1]
    assert result.learned_epoch.shape == (600,)
    assert int(result.learned_epoch.min()) >= 0 and int(result.learned_epoch.max()) <= 4


# mixup also draws from the run's generator; crop_flip draws flips and offsets per epoch
@pytest.mark.parametrize(
    ("objective", "augment"), [("cross_entropy", "crop_flip"), ("mixup", "flip")]
)
def test_resume_equals_uninterrupted_run(digits, tmp_path, objective, augment):
    config = TrainConfig(epochs=3, batch_size=64, lr=0.05, device="cpu", augment=augment)
    full = _train(digits, config, objective=objective)
    store = CheckpointStore(tmp_path / "run")
    _train(digits, config, store=store, stop_after_epoch=1, objective=objective)
    assert store.load()["epoch"] == 1
    resumed = _train(digits, config, store=store, objective=objective)
    assert [r["epoch"] for r in resumed.history] == [1, 2, 3]
    for key, value in full.state_dict.items():
        assert torch.equal(value, resumed.state_dict[key]), key
    assert resumed.history[-1]["val_nll"] == full.history[-1]["val_nll"]
    assert torch.equal(resumed.learned_epoch, full.learned_epoch)
    if objective == "mixup":  # its logits are of mixed inputs: no train accuracy, no learned epochs
        assert all(math.isnan(row["train_accuracy"]) for row in full.history)
        assert torch.equal(full.learned_epoch, torch.full_like(full.learned_epoch, -1))
    else:
        assert all(0.0 < row["train_accuracy"] <= 1.0 for row in full.history)
        assert int(full.learned_epoch.min()) >= 0
    completed = store.load()
    assert completed["complete"] and "optimizer" not in completed, (
        "a completed state keeps only the result"
    )
    again = _train(digits, config, store=store, objective=objective, stop_after_epoch=0)
    assert again.history == resumed.history or all(  # equal, NaN included (mixup's accuracy)
        a.keys() == b.keys()
        and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)
        for a, b in zip(again.history, resumed.history, strict=True)
    ), "a completed run is reused, not trained again"
    for key, value in full.state_dict.items():
        assert torch.equal(value, again.state_dict[key]), key


@pytest.mark.parametrize(("key", "other"), [("fingerprint", "other"), ("layout", 1)])
def test_checkpoint_of_another_configuration_is_not_resumed(digits, tmp_path, key, other):
    store = CheckpointStore(tmp_path / "run")
    config = TrainConfig(epochs=2, batch_size=64, device="cpu")
    _train(digits, config, store=store, stop_after_epoch=1)
    state = store.load()
    state[key] = other
    store.save(state)
    result = _train(digits, config, store=store)
    assert [r["epoch"] for r in result.history] == [1, 2]


def _library_run(digits, config, *, store=None, objective="cross_entropy", init_seed=1, **kwargs):
    """``train_model`` as a notebook calls it: no fingerprint."""
    data, train, val, _ = digits
    torch.manual_seed(init_seed)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=32
    )
    return train_model(
        model,
        ObjectiveLearner(build_objective(objective)),
        train,
        val,
        config,
        normalization=(data.mean, data.std),
        seed=5,
        store=store,
        **kwargs,
    )


@pytest.mark.parametrize("change", ["lr", "objective", "epochs", "init"])
def test_a_state_of_other_settings_is_never_resumed_even_without_a_fingerprint(
    digits, tmp_path, change, caplog
):
    """The engine's own fingerprint covers what it is handed: a changed learning rate,
    objective or initialisation, or more epochs after a finished run (whose state keeps no
    weights to continue from), starts afresh -- the result of a run that never saw the
    store -- with a warning, instead of continuing (or reusing) the other settings' state."""
    config = TrainConfig(epochs=2, batch_size=64, lr=0.05, device="cpu")
    store = CheckpointStore(tmp_path / "run")
    _library_run(digits, config, store=store, stop_after_epoch=None if change == "epochs" else 1)
    changed = {
        "lr": ({"config": dataclasses.replace(config, lr=0.2)}),
        "objective": {"config": config, "objective": "focal"},
        "epochs": {"config": dataclasses.replace(config, epochs=3)},
        "init": {"config": config, "init_seed": 2},
    }[change]
    fresh = _library_run(digits, **changed)
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.training.engine"):
        resumed = _library_run(digits, store=store, **changed)
    assert "discarding checkpoint" in caplog.text
    untimed = [
        [{k: v for k, v in row.items() if k != "seconds"} for row in run.history]
        for run in (fresh, resumed)
    ]
    assert untimed[0] == untimed[1]
    for key, value in fresh.state_dict.items():
        assert torch.equal(value, resumed.state_dict[key]), key


def test_a_runs_thread_count_is_its_own_and_a_resume_under_another_says_so(
    digits, tmp_path, caplog
):
    """torch's thread count is process-wide: a run's ``num_threads`` is restored after it
    (a later run with ``num_threads: null`` must not inherit it), and resuming a CPU state
    under another count -- which changes the last bits of CPU sums -- is logged."""
    before = torch.get_num_threads()
    store = CheckpointStore(tmp_path / "run")
    pinned = TrainConfig(epochs=2, batch_size=64, device="cpu", num_threads=before + 1)
    _library_run(digits, pinned, store=store, stop_after_epoch=1)
    assert torch.get_num_threads() == before
    assert store.load()["threads"] == before + 1
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.training.engine"):
        _library_run(
            digits,
            dataclasses.replace(pinned, num_threads=before + 2),
            store=store.for_configuration("x"),
        )
        assert "threads" not in caplog.text  # a fresh state: nothing to mix
        state = store.load()
        state["threads"] = before + 2  # as if written by a machine with another default count
        store.save(state)
        _library_run(digits, pinned, store=store)
    assert (
        f"resuming with {before + 1} CPU threads a state trained with {before + 2}" in caplog.text
    )
    assert torch.get_num_threads() == before


def test_a_run_of_another_configuration_keeps_an_interrupted_one_resumable(digits, tmp_path):
    run_folder = CheckpointStore(
        tmp_path / "ce" / "seed_0"
    )  # what the catalog gives a (method, seed)
    interrupted = run_folder.for_configuration("config-a")
    config = TrainConfig(epochs=3, batch_size=64, device="cpu")
    _train(digits, config, store=interrupted, stop_after_epoch=1)
    other = TrainConfig(epochs=2, batch_size=32, device="cpu")  # e.g. another env, run meanwhile
    _train(digits, other, store=run_folder.for_configuration("config-b"))
    assert interrupted.load()["epoch"] == 1, "the other configuration did not discard this state"
    resumed = _train(digits, config, store=interrupted, stop_after_epoch=2)
    assert [r["epoch"] for r in resumed.history] == [1, 2], "it continued from epoch 1"


def test_best_val_error_selection_keeps_the_best_epoch(digits):
    config = TrainConfig(epochs=3, batch_size=64, device="cpu", select="best_val_error")
    result = _train(digits, config)
    best = min(result.history, key=lambda r: (1 - r["val_accuracy"], r["epoch"]))
    assert result.selected_epoch == best["epoch"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"epochs": 0}, "epochs must be an integer >= 1, got 0"),
        ({"epochs": True}, "epochs must be an integer >= 1, got True"),
        ({"eval_batch_size": 0}, "eval_batch_size must be an integer >= 1, got 0"),
        ({"checkpoint_every": 1.5}, "checkpoint_every must be an integer >= 1"),
        ({"num_threads": 0}, "num_threads must be an integer >= 1, got 0"),
        ({"nesterov": "false"}, "nesterov must be true or false"),
        ({"track_test": "no"}, "track_test must be true or false"),
        ({"nesterov": True, "momentum": 0.0}, "nesterov needs momentum > 0"),
        ({"epochs": 200, "milestones": [150, 250]}, r"milestones \[250\] would never lower"),
        ({"epochs": 10, "milestones": [10]}, r"milestones \[10\] would never lower"),
        ({"lr": -0.1}, r"lr must be in \(0"),
        ({"milestones": [5, 3]}, "milestones must be increasing"),
        ({"select": "best"}, "select must be one of"),
        ({"augment": "cutout"}, "augment must be one of"),
        ({"reuse": "yes"}, "reuse must be one of 'same_code', 'ignore_code', got 'yes'"),
        ({"learning_rate": 0.1}, r"unknown training parameter\(s\) \['learning_rate'\]"),
        ({"lr": "fast"}, "lr must be a number, got 'fast'"),
        ({"milestones": [10, "x"]}, "milestones must be an integer >= 1, got 'x'"),
    ],
)
def test_bad_training_parameters_fail(params, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_params(params)


def test_an_unknown_training_key_fails_with_the_valid_keys():
    with pytest.raises(
        ValueError,
        match=(
            r"unknown training parameter\(s\) \['extra'\]; valid: "
            r"\['augment', 'batch_size', 'channels_last', "
        ),
    ):
        TrainConfig.from_params({"epochs": 2, "extra": {"warmup": 5}})


def test_crop_flip_keeps_shape_and_content_statistics():
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(16, 3, 32, 32)
    out = augment_batch(images, "crop_flip", generator)
    assert out.shape == images.shape
    assert not torch.equal(out, images)
    flipped = augment_batch(images, "none", generator)
    assert torch.equal(flipped, images)


def test_crop_pads_black_pixels_like_the_papers_random_crop():
    """Each image flipped, zero-padded by 4 in pixel space and cropped at its offsets -- what
    torchvision's RandomCrop(32, padding=4) + RandomHorizontalFlip do before Normalize."""
    from calib_pipeline.training.data import AugmentationDraws, Normalizer, apply_augmentation

    generator = torch.Generator().manual_seed(0)
    images = torch.randint(1, 256, (6, 3, 8, 8), generator=generator, dtype=torch.uint8)
    draws = AugmentationDraws(
        torch.tensor([False, True, False, True, False, False]),
        torch.tensor([0, 8, 4, 1, 7, 3]),
        torch.tensor([0, 8, 4, 6, 2, 0]),
    )
    out = apply_augmentation(images, draws)
    for i in range(6):
        image = images[i].flip(-1) if draws.flip[i] else images[i]
        padded = torch.nn.functional.pad(image, (4, 4, 4, 4))
        dy, dx = int(draws.dy[i]), int(draws.dx[i])
        assert torch.equal(out[i], padded[:, dy : dy + 8, dx : dx + 8]), i
    assert int((out[0, :, :4, :4] != 0).sum()) == 0, "offset (0, 0): the top-left 4x4 is padding"
    normalizer = Normalizer((0.5, 0.4, 0.3), (0.25, 0.2, 0.1), device=torch.device("cpu"))
    corner = normalizer(out)[0, :, 0, 0]
    assert torch.allclose(corner, torch.tensor([-2.0, -2.0, -3.0])), "black, then normalised"


@dataclass
class _InputRecorder(ObjectiveLearner):
    """Records the train inputs the engine hands a step (no training)."""

    seen: list = field(default_factory=list)

    def step(
        self, model, optimizer, inputs, targets, meta_inputs=None, meta_targets=None, *, epoch=1
    ):
        self.seen.append(inputs.clone())
        return {"loss": torch.zeros((), dtype=torch.float64)}


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)`")  # no optimizer step
def test_the_engine_augments_raw_pixels_then_normalises():
    """A crop's padding reaches the model as a normalised black pixel, (0 - mean) / std --
    not a reflected (or zero) normalised value."""
    images = torch.full((64, 1, 8, 8), 200, dtype=torch.uint8)
    labels = torch.zeros(64, dtype=torch.long)
    learner = _InputRecorder(build_objective("cross_entropy"))
    torch.manual_seed(0)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=32
    )
    config = TrainConfig(
        epochs=1, batch_size=64, device="cpu", augment="crop_flip", track_test=False
    )
    train_model(
        model,
        learner,
        Split(images, labels),
        Split(images[:8], labels[:8]),
        config,
        normalization=((0.5,), (0.25,)),
        seed=3,
    )
    seen = learner.seen[0]
    black, bright = (0.0 - 0.5) / 0.25, (200 / 255 - 0.5) / 0.25
    values = sorted(seen.unique().tolist())
    assert values == [pytest.approx(black), pytest.approx(bright)], "padding is black, nothing else"


def test_batch_stream_covers_every_sample_once_per_epoch():
    stream = BatchStream(
        torch.arange(10).view(10, 1), torch.arange(10), 4, torch.Generator().manual_seed(0)
    )
    seen = torch.cat([index for index, _, _ in stream])
    assert sorted(seen.tolist()) == list(range(10)) and len(stream) == 3
    with pytest.raises(ValueError, match="empty split"):
        BatchStream(torch.empty(0, 1), torch.empty(0), 4, torch.Generator())


@pytest.mark.parametrize("meta_size", [200, 400])  # 6 train steps: 3 or 1.5 meta-val permutations
def test_meta_learning_run_resumes_exactly(digits, tmp_path, meta_size):
    from calib_pipeline.calibration.meta import build_meta_learner

    data, train, val, test = digits
    meta_val = Split(
        data.train_images[800 : 800 + meta_size], data.train_labels[800 : 800 + meta_size]
    )
    config = TrainConfig(epochs=2, batch_size=100, lr=0.05, device="cpu", milestones=(1,))

    def run(store=None, stop_after_epoch=None):
        torch.manual_seed(3)
        model = build_model(
            "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=16
        )
        learner = build_meta_learner("fl_gamma_sece", num_classes=10, feature_dim=16)
        return train_model(
            model,
            learner,
            train,
            val,
            config,
            normalization=(data.mean, data.std),
            seed=2,
            test=test,
            meta_val=meta_val,
            store=store,
            fingerprint="meta",
            stop_after_epoch=stop_after_epoch,
        )

    full = run()
    store = CheckpointStore(tmp_path / "meta")
    run(store=store, stop_after_epoch=1)
    assert store.load()["learner"]["name"] == "fl_gamma_sece"
    resumed = run(store=store)
    for key, value in full.state_dict.items():
        assert torch.equal(value, resumed.state_dict[key]), key
    for key, value in full.meta_state["module"].items():  # γ-Net weights
        assert torch.equal(value, resumed.meta_state["module"][key]), key
    assert full.history[-1]["test_gamma_std"] == resumed.history[-1]["test_gamma_std"]
    assert all(torch.isfinite(torch.tensor(r["train_loss"])) for r in full.history)


def test_meta_learner_requires_a_meta_val_split(digits):
    from calib_pipeline.calibration.meta import build_meta_learner

    data, train, val, _ = digits
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=16
    )
    with pytest.raises(ValueError, match="needs a meta_val split"):
        train_model(
            model,
            build_meta_learner("fl_gamma_sece", num_classes=10, feature_dim=16),
            train,
            val,
            TrainConfig(epochs=1, device="cpu"),
            normalization=(data.mean, data.std),
            seed=0,
        )


def test_divergence_fails_with_a_clear_message(digits):
    class Exploding:
        def __call__(self, logits, targets, **context):
            return (logits * float("inf")).sum()

    data, train, val, _ = digits
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=16
    )
    with pytest.raises(FloatingPointError, match="probe diverged in epoch 1"):
        train_model(
            model,
            ObjectiveLearner(Exploding()),
            train,
            val,
            TrainConfig(epochs=1, device="cpu"),
            normalization=(data.mean, data.std),
            seed=0,
            description="probe",
        )


def test_epoch_logits_are_written_once_per_epoch_and_survive_a_resume(digits, tmp_path):
    data, train, val, test = digits
    config = TrainConfig(epochs=3, batch_size=64, lr=0.05, device="cpu")

    def run(store=None, stop_after_epoch=None):
        torch.manual_seed(1)
        model = build_model(
            "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=32
        )
        return train_model(
            model,
            ObjectiveLearner(build_objective("cross_entropy")),
            train,
            val,
            config,
            normalization=(data.mean, data.std),
            seed=5,
            test=test,
            store=store,
            fingerprint="fp",
            record_epoch_logits=True,
            stop_after_epoch=stop_after_epoch,
        )

    full = run()
    store = CheckpointStore(tmp_path / "run")
    run(store=store, stop_after_epoch=2)
    assert "epoch_logits" not in store.load(), "the resume state does not grow with the epochs"
    assert sorted(p.name for p in (store.directory / "epoch_logits").iterdir()) == [
        "00001.pt",
        "00002.pt",
    ]
    resumed = run(store=store)
    for split in ("val", "test"):
        assert len(resumed.epoch_logits[split]) == 3
        for a, b in zip(full.epoch_logits[split], resumed.epoch_logits[split]):
            assert torch.equal(a, b)


@dataclass
class _ScriptedLearner(ObjectiveLearner):
    """Reports, without training, a loss and logits fixed by each sample's id (the value of
    all its pixels) and the epoch the engine passes: sample ``i`` is misclassified in epoch ``e``
    when ``(i + e) % 3 == 0``; the loss of a batch is the mean of its ids."""

    steps_per_epoch: int = 1
    report_logits: bool = True
    calls: list = field(default_factory=list)

    def step(
        self, model, optimizer, inputs, targets, meta_inputs=None, meta_targets=None, *, epoch=1
    ):
        self.calls.append(epoch)  # the epoch the engine passes
        ids = torch.round((inputs[:, 0, 0, 0] * 0.25 + 0.5) * 255).long()
        wrong = (ids + epoch) % 3 == 0
        logits = F.one_hot(torch.where(wrong, (targets + 1) % 10, targets), 10).float()
        stats = {"loss": ids.double().mean(), "batch": torch.tensor(float(len(ids)))}
        return {**stats, "logits": logits} if self.report_logits else stats


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)`")  # no optimizer step
@pytest.mark.parametrize("report_logits", [True, False])
def test_train_statistics_and_learned_epochs_are_exact(report_logits):
    """100 samples in batches of 32 (the last one holds 4): the epoch's loss weights each
    batch by its size, the accuracy and the learned epochs follow the scripted mistakes."""
    ids = torch.arange(100)
    images = ids.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 1, 8, 8).contiguous()
    labels = torch.randint(0, 10, (100,), generator=torch.Generator().manual_seed(0))
    learner = _ScriptedLearner(
        build_objective("cross_entropy"), steps_per_epoch=4, report_logits=report_logits
    )
    torch.manual_seed(0)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=32
    )
    config = TrainConfig(epochs=3, batch_size=32, device="cpu")
    result = train_model(
        model,
        learner,
        Split(images, labels),
        Split(images[:20], labels[:20]),
        config,
        normalization=((0.5,), (0.25,)),
        seed=3,
    )
    assert learner.calls == [1] * 4 + [2] * 4 + [3] * 4
    for epoch, row in enumerate(result.history, start=1):
        assert row["train_loss"] == pytest.approx(49.5, abs=1e-12)  # mean id, not of batch means
        assert row["train_batch"] == pytest.approx(25.0, abs=1e-12)  # (32 * 3 + 4) / 4 steps
        expected = ((ids + epoch) % 3 != 0).double().mean().item()
        if report_logits:
            assert row["train_accuracy"] == pytest.approx(expected, abs=1e-12)
        else:
            assert math.isnan(row["train_accuracy"])
    # last misclassified in epoch 3 (i % 3 == 0: never learned, 0), 2 (learned in 3), 1 (in 2)
    # no logits reported: learned epochs unknown (engine.NOT_TRACKED), not "learned in epoch 1"
    learned = torch.tensor([0, 3, 2])[ids % 3] if report_logits else torch.full((100,), -1)
    assert torch.equal(result.learned_epoch, learned)


@dataclass
class _VectorLossLearner(_ScriptedLearner):
    """Breaks the step protocol: a per-sample loss (or statistic) instead of a 0-d one."""

    vector: str = "loss"

    def step(
        self, model, optimizer, inputs, targets, meta_inputs=None, meta_targets=None, *, epoch=1
    ):
        stats = super().step(model, optimizer, inputs, targets, epoch=epoch)
        stats[self.vector] = torch.ones(len(targets))
        return stats


@pytest.mark.parametrize("vector", ["loss", "batch"])
def test_a_learner_that_reports_non_scalar_statistics_is_refused(vector):
    """Stacked per step, a per-sample loss would broadcast into wrong epoch statistics."""
    images = torch.zeros(32, 1, 8, 8, dtype=torch.uint8)
    labels = torch.zeros(32, dtype=torch.long)
    torch.manual_seed(0)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=32
    )
    learner = _VectorLossLearner(build_objective("cross_entropy"), vector=vector)
    with pytest.raises(
        ValueError, match=rf"_VectorLossLearner.step must return 0-d tensors.*'{vector}': \(32,\)"
    ):
        train_model(
            model,
            learner,
            Split(images, labels),
            Split(images[:8], labels[:8]),
            TrainConfig(epochs=1, batch_size=32, device="cpu"),
            normalization=((0.5,), (0.25,)),
            seed=0,
        )


def _squared_error(logits, targets, **context):
    return (
        (logits.softmax(1) - F.one_hot(targets, logits.shape[1]).to(logits.dtype))
        .square()
        .sum(1)
        .mean()
    )


def _plain_cross_entropy(logits, targets, **context):
    return F.cross_entropy(logits, targets)


def test_the_state_fingerprint_tells_methods_apart_without_a_caller_fingerprint(
    digits, tmp_path, caplog
):
    """Plain functions as objectives, and meta-learners (whose internal objective has no
    name), must not resume each other's state."""
    from calib_pipeline.calibration.methods import MethodSpec, build_method
    from calib_pipeline.training.engine import learner_identity

    data, train, val, _ = digits
    config = TrainConfig(epochs=2, batch_size=64, device="cpu")
    store = CheckpointStore(tmp_path / "run")

    def run(objective, **kwargs):
        torch.manual_seed(1)
        model = build_model(
            "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=32
        )
        return train_model(
            model,
            ObjectiveLearner(objective),
            train,
            val,
            config,
            normalization=(data.mean, data.std),
            seed=5,
            store=store,
            **kwargs,
        )

    run(_squared_error, stop_after_epoch=1)
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.training.engine"):
        run(_plain_cross_entropy)
    assert "discarding checkpoint" in caplog.text
    identities = [
        learner_identity(
            build_method(
                MethodSpec(key=k, meta_learner=m, params=p), num_classes=10, feature_dim=32
            )
        )
        for k, m, p in (
            ("a", "ce_sece", {}),
            ("b", "ce_dece", {}),
            ("c", "ce_sece", {"meta_lr": 0.01}),
        )
    ]
    assert len({repr(i) for i in identities}) == 3
    assert identities[2][2]["meta_lr"] == 0.01, "a meta-learner's own hyperparameters"

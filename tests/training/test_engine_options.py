"""The engine's speed options and its sync-free step (issue: a GPU-speed engine).

On a CPU there is no device to wait for, so "sync-free" is checked by what a step calls:
every operation that reads a device value back to the host (``item``, ``bool``, ``tolist``,
``nonzero``, boolean-mask indexing, ...) is recorded by a ``TorchFunctionMode`` around one
epoch of training. On a GPU ``benchmarks/bench_gpu.py`` also counts syncs with
``torch.cuda.set_sync_debug_mode``.
"""

from __future__ import annotations

import logging
import traceback

import pytest
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from calib_pipeline.calibration import precision as precision_module
from calib_pipeline.calibration.losses import build_objective
from calib_pipeline.calibration.meta import build_meta_learner
from calib_pipeline.calibration.methods import MethodSpec, ObjectiveLearner, check_method
from calib_pipeline.data import load_dataset
from calib_pipeline.models import build_model
from calib_pipeline.training import (
    CheckpointStore,
    Split,
    TrainConfig,
    accelerate,
    engine,
    train_model,
)

_SYNCING = {
    Tensor.item,
    Tensor.__bool__,
    Tensor.tolist,
    Tensor.__int__,
    Tensor.__float__,
    Tensor.__index__,
    Tensor.numpy,
    Tensor.cpu,
    torch.nonzero,
    Tensor.nonzero,
    torch.masked_select,
    Tensor.masked_select,
    torch.unique,
    Tensor.unique,
    torch.argwhere,
    Tensor.argwhere,
}


def _has_mask(index) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, Tensor) and p.dtype == torch.bool for p in parts)


class HostReads(TorchFunctionMode):
    """Records every call that would make the host wait for the device."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        masked = func in (Tensor.__getitem__, Tensor.__setitem__) and _has_mask(args[1])
        if func in _SYNCING or masked:
            where = "".join(traceback.format_stack(limit=4)[:-1])
            self.calls.append(f"{getattr(func, '__name__', func)} at\n{where}")
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def digits():
    data = load_dataset("digits")
    return (
        data,
        Split(data.train_images[:256], data.train_labels[:256]),
        Split(data.train_images[256:384], data.train_labels[256:384]),
        Split(data.train_images[384:512], data.train_labels[384:512]),
    )


def _model(seed: int = 1, feature_dim: int = 16):
    torch.manual_seed(seed)
    return build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=8, feature_dim=feature_dim
    )


def _learner(method: str):
    if method in ("fl_gamma_sece", "ce_dece", "fl_gamma"):
        return build_meta_learner(method, num_classes=10, feature_dim=16)
    return ObjectiveLearner(build_objective(method))


def _run(digits, config, method="cross_entropy", **kwargs):
    data, train, val, meta_val = digits
    return train_model(
        _model(),
        _learner(method),
        train,
        val,
        config,
        normalization=(data.mean, data.std),
        seed=4,
        meta_val=meta_val,
        description=method,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("method", "augment"),
    [
        ("cross_entropy", "crop_flip"),
        ("mixup", "flip"),
        ("focal", "crop_flip"),
        ("fl_gamma_sece", "crop_flip"),
        ("ce_dece", "none"),
    ],
)
def test_a_training_epoch_never_reads_device_values_back(digits, method, augment):
    data, train, val, meta_val = digits
    config = TrainConfig(epochs=1, batch_size=50, device="cpu", augment=augment, grad_clip=5.0)
    splits = {"train": train, "val": val, "test": None, "meta_val": meta_val}
    run = engine._setup(
        _model(),
        _learner(method),
        config,
        splits,
        normalization=(data.mean, data.std),
        seed=0,
        record_epoch_logits=False,
        description="t",
    )
    reads = HostReads()
    with reads:
        trained = engine._train_epoch(run, 1)
    assert not reads.calls, f"{len(reads.calls)} host reads; first: {reads.calls[0]}"
    assert torch.isfinite(trained.stats["train_loss"])
    if method in ("cross_entropy", "focal"):  # bookkeeping ran (mixup reports no logits)
        assert int((run.last_wrong == 1).sum()) > 0


def test_the_recorder_sees_the_syncs_the_old_step_made():
    """The check above can fail: the old bookkeeping (boolean mask) and a `.item()` show."""
    last_wrong, index = torch.full((6,), -1), torch.arange(3)
    wrong = torch.tensor([True, False, True])
    reads = HostReads()
    with reads:
        last_wrong[index[wrong]] = 1
        torch.rand(()).item()
    assert len(reads.calls) == 2


def _autocast_seen(model) -> list[bool]:
    seen: list[bool] = []
    model.register_forward_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
    return seen


@pytest.mark.parametrize("method", ["cross_entropy", "fl_gamma_sece"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_precision_applies_to_plain_objectives_and_meta_learners(digits, method, precision):
    data, train, val, meta_val = digits
    model = _model()
    seen = _autocast_seen(model.head)
    config = TrainConfig(
        epochs=1, batch_size=64, device="cpu", precision=precision, track_test=False
    )
    result = train_model(
        model,
        _learner(method),
        train,
        val,
        config,
        normalization=(data.mean, data.std),
        seed=4,
        meta_val=meta_val,
    )
    # train steps run the head under autocast with bf16; evaluation never does
    assert any(seen) == (precision == "bf16")
    assert not seen[-1], "the epoch's evaluation runs in fp32"
    assert all(torch.isfinite(torch.tensor(r["train_loss"])) for r in result.history)


def test_bf16_runs_give_close_but_not_identical_results(digits):
    config = {"epochs": 2, "batch_size": 64, "device": "cpu", "track_test": False}
    fp32 = _run(digits, TrainConfig(**config))
    bf16 = _run(digits, TrainConfig(**config, precision="bf16"))
    assert fp32.history[-1]["val_nll"] != bf16.history[-1]["val_nll"]
    assert bf16.history[-1]["val_accuracy"] == pytest.approx(
        fp32.history[-1]["val_accuracy"], abs=0.08
    )


def test_bf16_on_a_gpu_without_bf16_fails_clearly(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    with pytest.raises(ValueError, match="Tesla V100 has none -- use precision: fp32"):
        precision_module.check_device_precision(torch.device("cuda"), "bf16")
    precision_module.check_device_precision(torch.device("cuda"), "fp32")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"precision": "fp16"}, "precision must be one of 'fp32', 'bf16', got 'fp16'"),
        ({"amp": True}, "training.amp was replaced by training.precision"),
        ({"compile": "yes"}, "compile must be"),
        ({"channels_last": 1}, "channels_last must be"),
        ({"deterministic": "on"}, "deterministic must be"),
    ],
)
def test_bad_speed_options_fail(params, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_params(params)


def test_deterministic_holds_for_its_run_only_and_keeps_old_fingerprints(digits, tmp_path):
    """``deterministic`` switches torch to deterministic kernels for the run (on the CPU the
    same weights), restores torch's process-wide flags afterwards, and enters the stored
    configuration only when set, so states stored before it existed are still reused."""
    plain = TrainConfig(epochs=1, batch_size=64, device="cpu")
    strict = TrainConfig(epochs=1, batch_size=64, device="cpu", deterministic=True)
    assert "deterministic" not in plain.as_dict() and strict.as_dict()["deterministic"] is True
    assert TrainConfig.from_params(plain.as_dict()) == plain, "the stored form reads back"
    seen = []
    original = torch.use_deterministic_algorithms

    def record(mode, **kwargs):
        seen.append(mode)
        original(mode, **kwargs)

    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "use_deterministic_algorithms", record)
        strict_result = _run(digits, strict)
    assert seen[0] is True, "the run trained with deterministic kernels"
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark) == before
    plain_result = _run(digits, plain)
    for name, weight in plain_result.state_dict.items():
        assert torch.equal(weight, strict_result.state_dict[name]), name
    stored = CheckpointStore(tmp_path)
    _run(digits, plain, store=stored)
    again = _run(digits, plain, store=stored)
    assert again.resumed_after_epoch == 1, "reused: the default adds nothing to the fingerprint"
    assert _run(digits, strict, store=stored).resumed_after_epoch == 0, "set: another state"


def test_channels_last_stores_weights_nhwc_and_trains_like_nchw(digits):
    data, train, val, _ = digits
    config = {"epochs": 2, "batch_size": 64, "device": "cpu", "track_test": False}
    model = _model()
    nhwc = train_model(
        model,
        _learner("cross_entropy"),
        train,
        val,
        TrainConfig(**config, channels_last=True),
        normalization=(data.mean, data.std),
        seed=4,
    )
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.in_channels > 1)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert not conv.weight.is_contiguous()
    nchw = _run(digits, TrainConfig(**config))
    for a, b in zip(nchw.history, nhwc.history):
        assert a["val_nll"] == pytest.approx(b["val_nll"], rel=1e-3)


@pytest.fixture
def aot_eager(monkeypatch):
    """Compile with tracing + AOTAutograd but no C++ compiler (seconds, not minutes);
    counts the models compiled."""
    monkeypatch.setattr(accelerate, "COMPILE_BACKEND", "aot_eager")
    compiled: list[object] = []
    original = torch.compile

    def spy(model, **kwargs):
        compiled.append(kwargs)
        return original(model, **kwargs)

    monkeypatch.setattr(accelerate.torch, "compile", spy)
    torch._dynamo.reset()
    yield compiled
    torch._dynamo.reset()


def test_compile_trains_a_plain_objective_like_eager_mode(digits, aot_eager, caplog):
    # 256 samples in batches of 100: the last batch (56) gets its own graph, none is dropped
    config = {
        "epochs": 2,
        "batch_size": 100,
        "device": "cpu",
        "track_test": False,
        "augment": "crop_flip",
    }
    eager = _run(digits, TrainConfig(**config))
    with caplog.at_level(logging.INFO, logger="calib_pipeline.training.accelerate"):
        compiled = _run(digits, TrainConfig(**config, compile=True))
    assert aot_eager == [{"backend": "aot_eager", "mode": None, "dynamic": False}]
    assert "compiled without CUDA graphs" in caplog.text
    for a, b in zip(eager.history, compiled.history):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
        assert b["val_nll"] == pytest.approx(a["val_nll"], rel=1e-4)
    assert torch.equal(eager.learned_epoch, compiled.learned_epoch)


@pytest.mark.parametrize("method", ["fl_gamma_sece", "ce_dece"])
def test_compile_with_a_last_layer_meta_learner_compiles_its_backbone_and_trains_alike(
    digits, aot_eager, caplog, method
):
    config = {"epochs": 1, "batch_size": 100, "device": "cpu", "track_test": False}
    eager = _run(digits, TrainConfig(**config), method=method)
    with caplog.at_level(logging.INFO, logger="calib_pipeline.training.accelerate"):
        compiled = _run(digits, TrainConfig(**config, compile=True), method=method)
    assert aot_eager == [{"backend": "aot_eager", "mode": None, "dynamic": False}]
    assert "a meta step keeps the backbone's activations across two calls" in caplog.text
    for key, value in eager.state_dict.items():
        assert torch.allclose(
            value.float(), compiled.state_dict[key].float(), rtol=1e-4, atol=1e-6
        ), key
    for a, b in zip(eager.history, compiled.history):
        assert b["val_nll"] == pytest.approx(a["val_nll"], rel=1e-4)
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)


def test_compile_with_a_fully_unrolled_meta_learner_trains_eagerly_and_says_why(
    digits, aot_eager, caplog
):
    config = {"epochs": 1, "batch_size": 100, "device": "cpu", "track_test": False}
    data, train, val, meta_val = digits

    def run(train_config):
        model = _model()  # before the learner, as in _run: γ-Net's initialisation draws next
        learner = build_meta_learner("fl_gamma_sece", num_classes=10, feature_dim=16, unroll="full")
        return train_model(
            model,
            learner,
            train,
            val,
            train_config,
            normalization=(data.mean, data.std),
            seed=4,
            meta_val=meta_val,
        )

    eager = run(TrainConfig(**config))
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.training.accelerate"):
        fallback = run(TrainConfig(**config, compile=True))
    assert aot_eager == [], "nothing was compiled"
    assert "(second-order gradients through every parameter with unroll 'full')" in caplog.text
    assert "this run trains eagerly" in caplog.text
    for key, value in eager.state_dict.items():
        assert torch.equal(value, fallback.state_dict[key]), key


def test_the_compiled_meta_step_equals_the_eager_step(aot_eager):
    """One meta step (backbone update, look-ahead, γ-Net update) through the compiled backbone
    gives the eager step's losses, parameters and γ-Net to float rounding."""
    import copy

    torch.manual_seed(0)
    model = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=8, width=4, feature_dim=16
    )
    learner = build_meta_learner("fl_gamma_sece", num_classes=10, feature_dim=16)
    twin_model, twin = copy.deepcopy(model), copy.deepcopy(learner)
    twin.compiled_features = accelerate.compiled_forward(twin_model, twin, torch.device("cpu"))
    optimizers = [
        torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin_model)
    ]
    for step in range(3):
        batch = torch.randn(32, 1, 8, 8), torch.arange(32) % 10
        meta = torch.randn(32, 1, 8, 8), torch.arange(32) % 10
        a = learner.step(model, optimizers[0], *batch, *meta)
        b = twin.step(twin_model, optimizers[1], *batch, *meta)
        for key in a:
            assert float(b[key]) == pytest.approx(float(a[key]), rel=1e-5, abs=1e-7), (step, key)
    for p, q in zip(
        [*model.parameters(), *learner.parameters()], [*twin_model.parameters(), *twin.parameters()]
    ):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-7)
    for p, q in zip(
        model.buffers(), twin_model.buffers()
    ):  # BN statistics: meta-val never leaks in
        assert torch.allclose(p.float(), q.float(), rtol=1e-5, atol=1e-7)


def test_grad_clip_applies_to_meta_learners(digits):
    config = {"epochs": 1, "batch_size": 100, "device": "cpu", "track_test": False}
    free = _run(digits, TrainConfig(**config), method="fl_gamma_sece")
    clipped = _run(digits, TrainConfig(**config, grad_clip=1e-3), method="fl_gamma_sece")
    assert clipped.history[-1]["head_weight_norm"] != free.history[-1]["head_weight_norm"]
    data, train, val, meta_val = digits
    model = _model()  # before the learner, as in _run: γ-Net's initialisation draws next
    own = build_meta_learner("fl_gamma_sece", num_classes=10, feature_dim=16, max_grad_norm=1e-3)
    by_learner = train_model(
        model,
        own,
        train,
        val,
        TrainConfig(**config),
        normalization=(data.mean, data.std),
        seed=4,
        meta_val=meta_val,
    )
    for key, value in clipped.state_dict.items():
        assert torch.equal(value, by_learner.state_dict[key]), "grad_clip == max_grad_norm"


def test_contradicting_clips_fail_before_training():
    spec = MethodSpec(key="fm", meta_learner="fl_gamma_sece", params={"max_grad_norm": 2.0})
    with pytest.raises(
        ValueError,
        match=r"method 'fm': training.grad_clip \(5.0\) and meta learner "
        r"'fl_gamma_sece''s max_grad_norm \(2.0\) both clip",
    ):
        check_method(spec, TrainConfig(grad_clip=5.0))
    check_method(spec, TrainConfig(grad_clip=2.0))
    check_method(spec, TrainConfig())


def test_compile_without_a_cpp_compiler_is_refused_before_training(monkeypatch):
    """Inductor needs a C++ compiler: without one torch failed inside the first step with
    its own error; the run refuses before training and names the way out."""
    model = build_model(
        "small_cnn", in_channels=1, num_classes=4, image_size=8, width=4, feature_dim=8
    )
    learner = ObjectiveLearner(build_objective("cross_entropy"))
    monkeypatch.setattr(accelerate, "COMPILE_BACKEND", "inductor")
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setattr(accelerate.shutil, "which", lambda name: None)
    with pytest.raises(
        ValueError, match=r"training.compile needs a C\+\+ compiler .* training.compile: false"
    ):
        accelerate.compiled_forward(model, learner, torch.device("cpu"))
    monkeypatch.setattr(
        accelerate.shutil, "which", lambda name: "/usr/bin/g++" if name == "g++" else None
    )
    assert (
        accelerate.compiled_forward(model, learner, torch.device("cpu")) is not None
    )  # compiles lazily

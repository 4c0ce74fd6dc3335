"""Suite entry points, options, batched evaluation, reliability bins, bootstrap and autograd."""

import math
import re

import numpy as np
import pytest
import torch

from calib_pipeline.calibration import _metrics_kernels as kernels
from calib_pipeline.calibration import _metrics_soft as soft
from calib_pipeline.calibration import metrics as M

KEYS = [
    "accuracy",
    "error",
    "nll",
    "brier",
    "mean_confidence",
    "mean_entropy",
    "ece",
    "ece_em",
    "mce",
    "ece_l2",
    "ece_lb",
    "classwise_ece",
    "overconfidence_error",
    "debiased_ece_l2",
    "auroc",
    "decomp_alpha",
    "decomp_beta",
    "decomp_gamma",
    "sece",
    "sb_ece",
    "dece",
    "smooth_ece",
    "ks_error",
    "aurc",
    "augrc",
]
ON_REQUEST = ["skce", "skce_p_value", "ece_kde", "ece_kde_top"]


def _data(n=400, k=7, seed=0, runs=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    shape = (n, k) if runs is None else (runs, n, k)
    logits = (torch.randn(shape, generator=g) * 2.5).to(dtype)
    labels = torch.randint(0, k, shape[:-1], generator=g)
    return logits, labels


def test_metric_names_and_suite_keys():
    assert M.metric_names() == KEYS + ON_REQUEST
    assert M.default_metric_names() == KEYS and M.ON_REQUEST == ON_REQUEST
    assert set(M.METRICS) == set(KEYS + ON_REQUEST)
    logits, labels = _data()
    values = M.calibration_metrics(logits, labels)
    assert list(values) == KEYS
    assert all(isinstance(v, float) and math.isfinite(v) for v in values.values())
    assert values["error"] == pytest.approx(1 - values["accuracy"])


def test_a_built_metric_holds_its_validated_options_and_scores_as_the_function():
    logits, labels = _data()
    metric = M.build_metric("ece", n_bins=np.int64(10), scheme="mass")
    assert metric.options == {"n_bins": 10, "scheme": "mass", "norm": "l1", "closure": "right"}
    assert type(metric.options["n_bins"]) is int
    assert float(metric(logits, labels)) == float(M.ece(logits, labels, n_bins=10, scheme="mass"))
    assert M.build_metric("smooth_ece").options == {"bandwidth": None}


def test_metric_options_are_checked_without_scoring():
    M.METRICS.check("ece", n_bins=10, closure="left")
    M.METRICS.check("smooth_ece", bandwidth=None)  # None: the automatic bandwidth
    with pytest.raises(ValueError, match="bandwidth must be a number, got None"):
        M.METRICS.check("sece", bandwidth=None)
    with pytest.raises(ValueError, match="closure must be one of 'right', 'left', got 'both'"):
        M.METRICS.check("mce", closure="both")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['norm'\]"):
        M.METRICS.check("mce", norm="l2")


def test_every_metric_function_equals_its_suite_value():
    logits, labels = _data()
    values = M.calibration_metrics(logits, labels, n_bins=12)
    for key in KEYS:
        kwargs = {"n_bins": 12} if "n_bins" in M._accepted_options(key) else {}
        assert float(getattr(M, key)(logits, labels, **kwargs)) == pytest.approx(
            values[key], rel=1e-6, abs=1e-9
        ), key


def test_options_are_forwarded_to_the_metrics_that_accept_them():
    logits, labels = _data()
    default = M.calibration_metrics(logits, labels, keys=["ece", "ece_em", "accuracy"])
    mass = M.calibration_metrics(logits, labels, keys=["ece", "ece_em", "accuracy"], scheme="mass")
    assert mass["ece"] == pytest.approx(default["ece_em"])
    assert mass["accuracy"] == default["accuracy"]
    subset = M.calibration_metrics(logits, labels, keys=["sece", "smooth_ece"], bandwidth=0.05)
    assert subset["sece"] == pytest.approx(float(M.sece(logits, labels, bandwidth=0.05)), rel=1e-6)
    assert subset["smooth_ece"] == pytest.approx(
        float(M.smooth_ece(logits, labels, bandwidth=0.05))
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda x, y: M.calibration_metrics(x, y, colour="red"),
            r"unknown option\(s\) \['colour'\]",
        ),
        (
            lambda x, y: M.calibration_metrics(x, y, keys=["ece", "nope"]),
            "unknown metric 'nope'; valid metric names are: accuracy",
        ),
        (
            lambda x, y: M.calibration_metrics(x, y, keys=["accuracy"], scheme="mass"),
            "unknown option",
        ),
        (lambda x, y: M.ece(x, y, bandwidth=0.1), "metric 'ece' got unknown parameter"),
        (lambda x, y: M.ece(x, y, n_bins=0), "n_bins must be an integer >= 1, got 0"),
        (lambda x, y: M.ece(x, y, n_bins=2.5), "n_bins must be an integer >= 1, got 2.5"),
        (lambda x, y: M.ece(x, y, scheme="quantile"), "scheme must be one of"),
        (lambda x, y: M.ece(x, y, norm="l3"), "norm must be one of"),
        (lambda x, y: M.ece(x, y, closure="both"), "closure must be one of"),
        (lambda x, y: M.sece(x, y, bandwidth=-1), r"bandwidth must be in \(0.0, inf\), got -1"),
        (
            lambda x, y: M.sb_ece(x, y, temperature=0),
            r"temperature must be in \(0.0, inf\), got 0",
        ),
        (lambda x, y: M.dece(x, y, tau_a=float("nan")), "tau_a must be a finite number, got nan"),
        (
            lambda x, y: M.sece(x, y, bandwidth=math.inf),
            "bandwidth must be a finite number, got inf",
        ),
        (lambda x, y: M.smooth_ece(x, y, bandwidth="auto"), "bandwidth must be a number"),
        (lambda x, y: M.sb_ece(x, y, label_binned=1), "label_binned must be true or false"),
        (lambda x, y: M.bootstrap_ci(x, y, "nope"), "unknown metric 'nope'"),
        (lambda x, y: M.bootstrap_ci(x, y, level=1.0), r"level must be in \(0, 1\)"),
        (
            lambda x, y: M.bootstrap_ci(x, y, n_resamples=0),
            "n_resamples must be an integer >= 1, got 0",
        ),
        (lambda x, y: M.ece(x, y[:-1]), "shape mismatch"),
    ],
)
def test_bad_options_raise_value_error(call, message):
    logits, labels = _data(50)
    with pytest.raises(ValueError, match=message):
        call(logits, labels)


def test_batched_equals_one_call_per_run_for_every_key():
    logits, labels = _data(n=300, k=6, runs=4)
    logits[2] = logits[2].half().float()  # quantised run: ties
    batched = M.calibration_metrics_batched(logits, labels, n_bins=10)
    assert set(batched) == set(KEYS)
    for run in range(4):
        single = M.calibration_metrics(logits[run], labels[run], n_bins=10)
        for key in KEYS:
            assert batched[key].shape == (4,)
            assert batched[key][run] == pytest.approx(single[key], rel=1e-5, abs=1e-9), (key, run)


def test_batched_accepts_shared_labels_and_numpy():
    logits, labels = _data(n=200, k=5, runs=3)
    shared = labels[0]
    batched = M.calibration_metrics_batched(logits.numpy(), shared.numpy(), keys=["ece", "nll"])
    for run in range(3):
        assert batched["ece"][run] == pytest.approx(float(M.ece(logits[run], shared)))


def test_hard_metrics_are_permutation_invariant_even_with_tied_confidences():
    logits, labels = _data(n=600, k=5)
    logits = logits.half().float()  # many ties: equal-mass bins must not split them by order
    order = torch.randperm(600, generator=torch.Generator().manual_seed(3))
    hard = [k for k in KEYS if k not in ("sece", "sb_ece", "dece")]
    before = M.calibration_metrics(logits, labels, keys=hard)
    after = M.calibration_metrics(logits[order], labels[order], keys=hard)
    for key in hard:
        assert after[key] == pytest.approx(before[key], rel=1e-9, abs=1e-12), key


def test_equal_mass_bins_hold_floor_spaced_counts_and_never_split_ties():
    probs = torch.tensor([[0.9, 0.1]] * 6 + [[0.7, 0.3]] * 4, dtype=torch.float64)
    labels = torch.zeros(10, dtype=torch.long)
    right = M.reliability_bins(probs, labels, n_bins=2, scheme="mass", inputs="probs")
    left = M.reliability_bins(
        probs, labels, n_bins=2, scheme="mass", closure="left", inputs="probs"
    )
    # median edge falls inside the tie group at .9: right closure keeps it below, left above
    assert right["counts"].tolist() == [10, 0] and left["counts"].tolist() == [4, 6]
    untied = torch.softmax(
        torch.randn(103, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64), -1
    )
    counts = M.reliability_bins(
        untied, torch.zeros(103, dtype=torch.long), n_bins=10, scheme="mass", inputs="probs"
    )["counts"]
    assert np.cumsum(counts)[:-1].tolist() == [j * 103 // 10 for j in range(1, 10)]


@pytest.mark.parametrize("n_bins", [10, 15, 100, 1000])
@pytest.mark.parametrize("scheme", ["width", "mass"])
def test_reliability_bins_describe_the_ece(n_bins, scheme):
    logits, labels = _data(n=2000, k=10)
    bins = M.reliability_bins(logits, labels, n_bins=n_bins, scheme=scheme)
    assert bins["edges"].shape == (n_bins + 1,) and bins["counts"].shape == (n_bins,)
    assert bins["edges"][0] == 0 and bins["edges"][-1] == 1 and np.all(np.diff(bins["edges"]) >= 0)
    assert bins["counts"].sum() == 2000
    empty = bins["counts"] == 0
    assert np.isnan(bins["confidence"][empty]).all() and np.isnan(bins["accuracy"][empty]).all()
    filled = ~empty
    assert np.all(
        (bins["confidence"][filled] >= bins["edges"][:-1][filled])
        & (bins["confidence"][filled] <= bins["edges"][1:][filled])
    )
    from_bins = np.nansum(bins["counts"] * np.abs(bins["accuracy"] - bins["confidence"])) / 2000
    assert from_bins == pytest.approx(
        float(M.ece(logits, labels, n_bins=n_bins, scheme=scheme)), abs=1e-12
    )


def test_label_binned_ece_bounds_binned_ece_from_above():
    logits, labels = _data(n=1000, k=4)
    for scheme in ("width", "mass"):
        binned = float(M.ece(logits, labels, scheme=scheme, norm="l2"))
        label_binned = float(M.ece_lb(logits, labels, scheme=scheme))
        assert label_binned >= binned - 1e-12
    assert float(M.ece_lb(logits, labels, norm="l1")) >= float(M.ece_em(logits, labels)) - 1e-12


def test_bootstrap_interval_is_seeded_and_brackets_the_point():
    logits, labels = _data(n=500, k=5)
    first = M.bootstrap_ci(logits, labels, "ece", n_resamples=300, seed=4)
    again = M.bootstrap_ci(logits, labels, "ece", n_resamples=300, seed=4)
    other = M.bootstrap_ci(logits, labels, "ece", n_resamples=300, seed=5)
    assert first == again and first != other
    assert first["low"] < first["point"] < first["high"]
    assert first["point"] == pytest.approx(float(M.ece(logits, labels)))
    assert set(first) == {"point", "low", "high", "level", "n_resamples"}
    narrow = M.bootstrap_ci(logits, labels, "ece", n_resamples=300, seed=4, level=0.5)
    assert first["low"] <= narrow["low"] <= narrow["high"] <= first["high"]


def test_bootstrap_resamples_score_exactly_the_resampled_data():
    """The resampled view gathers cached per-sample statistics; it must equal rescoring."""
    logits, labels = _data(n=120, k=4)
    base = kernels.Predictions.single(logits, labels, "logits")
    index = torch.randint(0, 120, (3, 120), generator=torch.Generator().manual_seed(0))
    view = base.resample(index)
    direct = M.calibration_metrics_batched(logits[index], labels[index], n_bins=8)
    for key in KEYS:
        options = {"n_bins": 8} if "n_bins" in M._accepted_options(key) else {}
        got = M.build_metric(key, **options).runs(view).detach().double().numpy()
        np.testing.assert_allclose(got, direct[key], rtol=1e-5, atol=1e-9, err_msg=key)


@pytest.mark.parametrize("key", ["nll", "brier", "mean_entropy"])
def test_a_resampled_view_gathers_per_sample_terms_not_the_scores(key):
    logits, labels = _data(n=200, k=6)
    base = kernels.Predictions.single(logits, labels, "logits")
    index = torch.randint(0, 200, (5, 200), generator=torch.Generator().manual_seed(2))
    view = base.resample(index)
    value = M.build_metric(key).runs(view)
    assert not {"scores", "log_probs", "probs"} & set(view._cache)  # N x K never gathered
    rescored = M.calibration_metrics_batched(logits[index], labels[index], keys=[key])[key]
    np.testing.assert_allclose(value.double().numpy(), rescored, rtol=1e-12)


@pytest.mark.parametrize("values", [torch.rand(50), torch.rand(50) > 0.5, torch.rand(50, 7)])
def test_the_resampling_gather_equals_advanced_indexing(values):
    index = torch.randint(0, 50, (4, 50), generator=torch.Generator().manual_seed(1))
    assert torch.equal(kernels._gather(values, index), values[index])


def test_bootstrap_of_probability_input_and_options():
    logits, labels = _data(n=300, k=5)
    probs = torch.softmax(logits.double(), -1)
    ci = M.bootstrap_ci(probs, labels, "mce", n_resamples=50, inputs="probs", n_bins=5)
    assert ci["point"] == pytest.approx(float(M.mce(logits.double(), labels, n_bins=5)))


@pytest.mark.parametrize("key", ["sece", "sb_ece", "dece"])
def test_differentiable_metrics_keep_the_graph_and_dtype(key):
    logits, labels = _data(n=64, k=5)
    logits.requires_grad_()
    value = getattr(M, key)(logits, labels)
    assert value.dtype == torch.float32 and value.requires_grad
    value.backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("key", "options"),
    [
        ("sb_ece", {"temperature": 0.01}),
        ("sb_ece", {"temperature": 0.01, "label_binned": True, "p": 1.0}),
        ("dece", {"tau_a": 10.0, "tau_b": 0.05}),
        ("sece", {"bandwidth": 0.1, "tau_a": 10.0}),
    ],
)
def test_differentiable_metrics_pass_gradcheck(key, options):
    logits, labels = _data(n=12, k=3, seed=5, dtype=torch.float64)
    logits.requires_grad_()
    assert torch.autograd.gradcheck(lambda x: getattr(M, key)(x, labels, **options), (logits,))


def test_temperature_scaled_logits_train_through_sb_ece():
    logits, labels = _data(n=256, k=10)
    temperature = torch.ones((), requires_grad=True)
    loss = M.sb_ece(logits / temperature, labels, temperature=0.01)
    loss.backward()
    assert temperature.grad is not None and temperature.grad != 0


def test_hard_metrics_return_detached_float64():
    logits, labels = _data()
    logits.requires_grad_()
    value = M.ece(logits, labels)
    assert value.dtype == torch.float64 and not value.requires_grad


def test_sece_blocks_give_the_same_value_as_one_block(monkeypatch):
    logits, labels = _data(n=300, k=4)
    whole = float(M.sece(logits, labels))
    monkeypatch.setattr(soft, "_KERNEL_BLOCK_ELEMENTS", 300 * 7)
    assert float(M.sece(logits, labels)) == pytest.approx(whole, rel=1e-6)


def test_top_label_blocks_give_the_same_statistics(monkeypatch):
    logits, labels = _data(n=1000, k=20)
    whole = M.calibration_metrics(logits, labels, keys=["ece", "accuracy", "mean_confidence"])
    monkeypatch.setattr(kernels, "_BLOCK_ELEMENTS", 20 * 3 // torch.get_num_threads())
    assert M.calibration_metrics(
        logits, labels, keys=["ece", "accuracy", "mean_confidence"]
    ) == pytest.approx(whole)


def test_fp16_logits_are_scored_as_their_float32_values():
    logits, labels = _data()
    half = logits.half()
    assert M.calibration_metrics(half, labels, keys=["ece", "nll"]) == pytest.approx(
        M.calibration_metrics(half.float(), labels, keys=["ece", "nll"])
    )


def test_binary_vector_input_is_top_label():
    p = torch.tensor([0.9, 0.2, 0.6, 0.4], dtype=torch.float64)
    labels = torch.tensor([1, 0, 0, 0])
    two_column = torch.stack([1 - p, p], 1)
    assert float(M.ece(p, labels, inputs="probs")) == pytest.approx(
        float(M.ece(two_column, labels, inputs="probs"))
    )
    z = torch.logit(p)
    assert float(M.nll(z, labels)) == pytest.approx(
        float(M.nll(two_column, labels, inputs="probs"))
    )


def test_every_available_device_gives_the_cpu_values():
    # the CPU always; CUDA too where a GPU is present (no skipped test on CPU machines)
    logits, labels = _data(n=500, k=10)
    cpu = M.calibration_metrics(logits, labels)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        values = M.calibration_metrics(logits.to(device), labels.to(device))
        assert values == pytest.approx(cpu, rel=1e-5, abs=1e-7), device


def test_a_single_metric_name_as_a_string_and_float_labels_out_of_range_are_clear():
    logits, labels = _data(50)
    as_string = M.calibration_metrics(logits, labels, keys="ece")
    assert as_string == M.calibration_metrics(logits, labels, keys=["ece"]) and list(as_string) == [
        "ece"
    ]
    for bad, shown in ((1e30, "1e+30"), (-1e30, "-1e+30"), (10.0, "10")):
        float_labels = labels.double().clone()
        float_labels[3] = bad
        with pytest.raises(
            ValueError, match=rf"labels out of range: found {re.escape(shown)}, valid"
        ):
            M.ece(logits, float_labels)


def test_batched_metrics_are_float64_whatever_the_input():
    logits, labels = _data(50)
    values = M.calibration_metrics_batched(logits.float()[None], labels)
    assert all(v.dtype == np.float64 for v in values.values()), {
        k: v.dtype for k, v in values.items()
    }


def test_the_sb_ece_temperature_follows_the_number_of_bins():
    from calib_pipeline.calibration.losses import build_objective
    from calib_pipeline.calibration.posthoc import build_calibrator

    logits, labels = _data(300)
    assert M.sb_ece_temperature(15) == M.SB_ECE_TEMPERATURE
    assert M.sb_ece_temperature(30) == pytest.approx(1 / (900 * math.log(1e4)))
    default = M.sb_ece(logits, labels, n_bins=30)
    assert default == M.sb_ece(logits, labels, n_bins=30, temperature=M.sb_ece_temperature(30))
    assert default != M.sb_ece(logits, labels, n_bins=30, temperature=M.SB_ECE_TEMPERATURE)
    calibrator = build_calibrator("temperature_sb_ece", n_bins=30)
    assert calibrator.hyperparameters["soft_bin_temperature"] == M.sb_ece_temperature(30)
    loss = build_objective("sb_ece", n_bins=30)
    explicit = build_objective("sb_ece", n_bins=30, temperature=M.sb_ece_temperature(30))
    assert loss(logits.double(), labels) == explicit(logits.double(), labels)


def test_every_metric_declares_how_reports_show_it():
    """The unit is declared at registration: a new metric cannot silently be shown in
    another unit than its siblings (as a hand-kept list of percent metrics allowed)."""
    from calib_pipeline.reports.common import metric_unit

    assert set(M.METRIC_UNITS) == set(M.METRICS.names())
    assert metric_unit("ece") == metric_unit("classwise_ece") == "%"
    assert (metric_unit("brier"), metric_unit("nll")) == ("×100", "")
    with pytest.raises(TypeError, match="unit must be one of"):
        M._register("ece_probe", lambda pred: pred, unit="percent", name="ECE probe")
    assert "ece_probe" not in M.METRICS.names()


def test_every_metric_has_one_name_no_other_metric_goes_by():
    """The report name is declared at registration, one per metric: equal-mass ECE is
    "AdaECE" everywhere, never "ACE" in one table and ``ece_em`` in another."""
    assert set(M.METRIC_NAMES) == set(M.METRICS.names())
    assert len(set(M.METRIC_NAMES.values())) == len(M.METRIC_NAMES)
    assert (M.METRIC_NAMES["ece_em"], M.METRIC_NAMES["ece_l2"]) == ("AdaECE", "L2-ECE")
    with pytest.raises(TypeError, match="name 'AdaECE' is already metric 'ece_em'"):
        M._register("ece_probe", lambda pred: pred, unit="%", name="AdaECE")
    assert "ece_probe" not in M.METRICS.names() and "ece_probe" not in M.METRIC_NAMES

"""Paper-layout reports and sweep selection on small synthetic study results."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as scipy_stats

from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.kedro_datasets import write_artifacts
from calib_pipeline.pipelines.reporting.reports import StudyResults, build_report, report_needs
from calib_pipeline.pipelines.reporting.selection import select_sweep_members

METRICS = [
    "accuracy",
    "error",
    "ece",
    "ece_em",
    "ece_l2",
    "classwise_ece",
    "brier",
    "auroc",
    "decomp_alpha",
    "decomp_beta",
    "decomp_gamma",
]


def tidy(labels, seeds, calibrators, values=None, shifts=()):
    """A tidy metrics table; ``values[(method, calibrator, split, metric)]`` lists one value per
    seed, every other cell is a random number in (0.05, 0.9)."""
    rng = np.random.default_rng(0)
    values = values or {}
    rows = []
    cells = [("val", "none", 0), ("test", "none", 0), *[("test", s, sev) for s, sev in shifts]]
    for method, label in labels.items():
        for i, seed in enumerate(seeds):
            for cal in ["none", *calibrators]:
                for split, shift, severity in cells:
                    for metric in METRICS:
                        given = (
                            values.get((method, cal, split, metric)) if shift == "none" else None
                        )
                        rows.append(
                            {
                                "dataset": "toy",
                                "study": "study",
                                "method": method,
                                "label": label,
                                "seed": seed,
                                "calibrator": cal,
                                "split": split,
                                "shift": shift,
                                "severity": severity,
                                "metric": metric,
                                "value": given[i] if given else float(rng.uniform(0.05, 0.9)),
                            }
                        )
    return pd.DataFrame(rows)


def study(labels, seeds, table, groups=None, **artifacts):
    return StudyResults(
        study="study",
        dataset="toy",
        methods=list(labels),
        seeds=list(seeds),
        labels=dict(labels),
        groups={m: (groups or {}).get(m, m) for m in labels},
        metrics=table,
        bins=pd.DataFrame(),
        **artifacts,
    )


def fitted_runs(methods, seeds, keys=("ts",), n=120, k=4):
    """Random val/test logits per run (sharper for later runs), NLL-TS calibrators fitted on val."""
    generator = torch.Generator().manual_seed(0)
    logits, calibrators = {}, {}
    for i, (method, seed) in enumerate((m, s) for m in methods for s in seeds):
        run = {}
        for split in ("val", "test"):
            labels = torch.randint(0, k, (n,), generator=generator)
            z = torch.randn(n, k, generator=generator)
            z[torch.arange(n), labels] += 1.5
            run[split] = {"logits": z * (1 + i), "labels": labels}
        logits[(method, seed)] = run
        calibrators[(method, seed)] = {
            key: build_calibrator("temperature_nll").fit(run["val"]["logits"], run["val"]["labels"])
            for key in keys
        }
    return logits, calibrators


def cell(values, spread="std", scale=100.0):
    x = np.asarray(values) * scale
    s = x.std(ddof=1) / (math.sqrt(len(x)) if spread == "sem" else 1.0)
    return f"{x.mean():.2f} ± {s:.2f}"


# --- selection ---------------------------------------------------------------------------

LS = {
    "ce": "CE",
    "ls_epsilon_0p01": "LS (epsilon=0.01)",
    "ls_epsilon_0p03": "LS (epsilon=0.03)",
    "ls_epsilon_0p05": "LS (epsilon=0.05)",
}
LS_GROUPS = {"ls_epsilon_0p01": "ls", "ls_epsilon_0p03": "ls", "ls_epsilon_0p05": "ls"}
LS_VALUES = {
    # mean val accuracy: 0.90, 0.89 (exactly 1 point below: eligible), 0.87 (excluded)
    ("ls_epsilon_0p01", "none", "val", "accuracy"): [0.899, 0.901],
    ("ls_epsilon_0p03", "none", "val", "accuracy"): [0.885, 0.895],
    ("ls_epsilon_0p05", "none", "val", "accuracy"): [0.87, 0.87],
    ("ls_epsilon_0p01", "none", "val", "ece_l2"): [0.05, 0.05],
    ("ls_epsilon_0p03", "none", "val", "ece_l2"): [0.04, 0.04],
    ("ls_epsilon_0p05", "none", "val", "ece_l2"): [0.01, 0.01],  # lowest, but 3 points below
    ("ls_epsilon_0p01", "none", "val", "error"): [0.1, 0.1],
    ("ls_epsilon_0p03", "none", "val", "error"): [0.2, 0.2],
    ("ls_epsilon_0p05", "none", "val", "error"): [0.3, 0.3],
    ("ls_epsilon_0p01", "none", "test", "ece"): [0.30, 0.30],
    ("ls_epsilon_0p03", "none", "test", "ece"): [0.20, 0.20],
    ("ls_epsilon_0p05", "none", "test", "ece"): [0.10, 0.12],
}


@pytest.fixture(scope="module")
def ls_table():
    return tidy(LS, [0, 1], ["ts"], LS_VALUES)


def test_karandikar_rule_excludes_lowest_ece_outside_accuracy_window(ls_table):
    filtered, record = select_sweep_members(ls_table, LS_GROUPS, "karandikar")
    assert set(filtered["method"]) == {"ce", "ls_epsilon_0p03"}
    assert record.to_dict("records") == [
        {
            "group": "ls",
            "method": "ls_epsilon_0p03",
            "label": "LS (epsilon=0.03)",
            "rule": "karandikar",
            "selected_on": "val",
            "metric": "ece_l2",
            "value": pytest.approx(0.04),
            "accuracy": pytest.approx(0.89),
            "members": "ls_epsilon_0p01, ls_epsilon_0p03, ls_epsilon_0p05",
        }
    ]
    assert set(filtered.groupby("method")["selected_on"].first().items()) == {
        ("ce", "fixed"),
        ("ls_epsilon_0p03", "val"),
    }
    # every calibrator, split and seed of the chosen member is kept
    assert len(filtered) == len(ls_table) // 2
    # a wider window admits the lowest-ECE member; a configurable metric changes the choice
    assert (
        select_sweep_members(ls_table, LS_GROUPS, "karandikar", tolerance=0.05)[1]["method"][0]
        == "ls_epsilon_0p05"
    )
    assert (
        select_sweep_members(ls_table, LS_GROUPS, "karandikar", metric="error")[1]["method"][0]
        == "ls_epsilon_0p01"
    )


def test_best_val_error_rule(ls_table):
    filtered, record = select_sweep_members(ls_table, LS_GROUPS, "best_val_error")
    assert record["method"].tolist() == ["ls_epsilon_0p01"] and record["metric"][0] == "error"
    assert "[test-selected]" not in " ".join(filtered["label"])


def test_test_ece_rule_labels_the_choice_everywhere(ls_table):
    filtered, record = select_sweep_members(ls_table, LS_GROUPS, "test_ece")
    assert record["method"].tolist() == ["ls_epsilon_0p05"]
    assert (
        record["selected_on"][0] == "test"
        and record["label"][0] == "LS (epsilon=0.05) [test-selected]"
    )
    chosen = filtered[filtered["method"] == "ls_epsilon_0p05"]
    assert set(chosen["label"]) == {"LS (epsilon=0.05) [test-selected]"}
    assert set(chosen["selected_on"]) == {"test"}
    assert set(filtered.loc[filtered["method"] == "ce", "label"]) == {"CE"}
    # a table built from it shows the mark
    summary = build_report("summary", study(LS, [0, 1], filtered), metrics=["ece"])
    assert "LS (epsilon=0.05) [test-selected]" in summary["summary"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rule": "lowest_ece"}, "karandikar, best_val_error, test_ece"),
        ({"rule": "best_val_error", "metric": "ece"}, "minimises 'error'"),
        ({"rule": "karandikar", "tolerance": 1.5}, "tolerance"),
        ({"rule": "karandikar", "metric": "sece"}, "missing"),
    ],
)
def test_selection_failure_paths(ls_table, kwargs, match):
    with pytest.raises(ValueError, match=match):
        select_sweep_members(ls_table, LS_GROUPS, **kwargs)


# --- Mukhoti et al. ----------------------------------------------------------------------

FOCAL = {"ce": "CE", "focal_gamma_1": "Focal (gamma=1)", "focal_gamma_3": "Focal (gamma=3)"}
FOCAL_GROUPS = {"focal_gamma_1": "focal", "focal_gamma_3": "focal"}
FOCAL_VALUES = {
    ("ce", "none", "test", "ece"): [0.10, 0.12, 0.14],
    ("ce", "ts_grid", "test", "ece"): [0.02, 0.03, 0.04],
    ("ce", "none", "test", "error"): [0.20, 0.25, 0.30],
}


@pytest.fixture(scope="module")
def focal_results():
    seeds = [0, 1, 2]
    logits, calibrators = fitted_runs(FOCAL, seeds, keys=("ts_grid",))
    histories = {
        (m, s): pd.DataFrame(
            {
                "epoch": [1, 2, 3],
                "lr": [0.1] * 3,
                "train_loss": [2.0, 1.0, 0.5],
                "train_accuracy": [0.5, 0.7, 0.9],
                "test_accuracy": [0.4, 0.6, 0.8],
                "test_nll": [1.0 + s, 2.0 + s, 3.0 + s],
                "test_ece": [0.1] * 3,
                "test_nll_correct": [0.5] * 3,
                "test_nll_incorrect": [2.0, float("nan"), 3.0],
                "test_entropy_correct": [0.3] * 3,
                "test_entropy_incorrect": [0.9] * 3,
                "head_weight_norm": [1.0, 2.0, 3.0 + i],
            }
        )
        for i, (m, s) in enumerate((m, s) for m in FOCAL for s in seeds)
    }
    return study(
        FOCAL,
        seeds,
        tidy(FOCAL, seeds, ["ts_grid"], FOCAL_VALUES),
        FOCAL_GROUPS,
        histories=histories,
        calibrators=calibrators,
        logits=logits,
    )


def test_mukhoti_table_cells_and_temperatures(focal_results):
    out = build_report("mukhoti_table", focal_results)
    table = out["table"]
    assert list(table.columns) == [
        "Method",
        "Error",
        "ECE Pre T",
        "ECE Post T",
        "AdaECE Pre T",
        "AdaECE Post T",
        "Classwise-ECE Pre T",
        "Classwise-ECE Post T",
    ]
    assert table["Method"].tolist() == list(FOCAL.values())
    ce = table.iloc[0]
    assert ce["Error"] == "25.00 ± 5.00"
    assert ce["ECE Pre T"] == "12.00 ± 2.00"
    t = np.mean(
        [
            focal_results.calibrators[("ce", s)]["ts_grid"].learned()["temperature"]
            for s in (0, 1, 2)
        ]
    )
    assert ce["ECE Post T"] == f"3.00 ± 1.00 ({t:.2f})"
    assert out["temperatures"].shape == (9, 3)
    paper = out["paper_ece"]
    assert paper.columns[:3].tolist() == ["Dataset", "CE ECE Pre T", "CE ECE Post T"]
    assert paper.loc[0, "CE ECE Post T"] == ce["ECE Post T"]
    assert out["paper_error"].columns.tolist() == ["Dataset", *FOCAL.values()]
    assert "ts_grid" in out["mukhoti_table"] and "| CE" in out["mukhoti_table"]


def test_mukhoti_table_selection_marks_test_selected(focal_results):
    out = build_report("mukhoti_table", focal_results, selection="test_ece")
    assert len(out["table"]) == 2 and out["table"]["Method"][1].endswith("[test-selected]")
    assert out["selection"]["selected_on"].tolist() == ["test"]
    assert "test-selected" in out["mukhoti_table"]


def test_mukhoti_table_failure_paths(focal_results):
    with pytest.raises(ValueError, match=r"valid calibrator keys: \['ts_grid'\]"):
        build_report("mukhoti_table", focal_results, calibrator="ts")
    with pytest.raises(ValueError, match="unknown parameter"):
        build_report("mukhoti_table", focal_results, temperature="grid")
    with pytest.raises(ValueError, match="spread"):
        build_report("mukhoti_table", focal_results, spread="iqr")
    with pytest.raises(ValueError, match="not in the metrics table"):
        build_report("mukhoti_table", focal_results, metrics=["ece", "smooth_ece"])
    without = study(FOCAL, [0, 1, 2], focal_results.metrics, FOCAL_GROUPS)
    with pytest.raises(ValueError, match="needs 'calibrators'"):
        build_report("mukhoti_table", without)


def test_mukhoti_curves_mean_over_seeds(focal_results):
    out = build_report("mukhoti_curves", focal_results)
    curves = out["curves"].set_index(["method", "quantity", "epoch"])
    assert curves.loc[("ce", "nll", 2), "mean"] == pytest.approx(3.0)  # seeds give 2, 3, 4
    assert curves.loc[("ce", "nll", 2), "std"] == pytest.approx(1.0)
    assert curves.loc[("ce", "nll_incorrect", 2), "n"] == 0  # NaN epochs are skipped, not zeros
    assert curves.loc[("ce", "head_weight_norm", 3), "mean"] == pytest.approx(4.0)  # 3, 4, 5
    assert set(out["curves"]["quantity"]) == {
        "nll",
        "nll_correct",
        "nll_incorrect",
        "entropy_correct",
        "entropy_incorrect",
        "head_weight_norm",
    }
    assert len(out["epochs_by_method"].axes) == 6 and len(out["overview"].axes) == 3
    assert [t.get_text() for t in out["epochs_by_method"].axes[0].get_legend().get_texts()] == list(
        FOCAL.values()
    )


def test_mukhoti_curves_failure_paths(focal_results):
    with pytest.raises(ValueError, match="valid panels: .*entropy_correct"):
        build_report("mukhoti_curves", focal_results, panels=["nll", "confidence"])
    with pytest.raises(ValueError, match="unknown method"):
        build_report("mukhoti_curves", focal_results, methods=["brier"])
    with pytest.raises(ValueError, match="needs 'histories'"):
        build_report("mukhoti_curves", study(FOCAL, [0, 1, 2], focal_results.metrics))


# --- Karandikar et al. -------------------------------------------------------------------

SOFT = {
    "ce": "CE",
    "sc_nll_mmce_beta_0p5": "NLL + MMCE (beta=0.5)",
    "sc_nll_mmce_beta_1": "NLL + MMCE (beta=1)",
    "sc_focal_none": "Focal",
    "sc_focal_sb_ece": "Focal + SB-ECE",
}
SOFT_GROUPS = {"sc_nll_mmce_beta_0p5": "sc_nll_mmce", "sc_nll_mmce_beta_1": "sc_nll_mmce"}
SOFT_VALUES = {
    ("ce", "none", "test", "ece_l2"): [0.09, 0.10, 0.11],
    ("sc_nll_mmce_beta_1", "none", "test", "ece_l2"): [0.04, 0.05, 0.07],
    ("sc_focal_sb_ece", "none", "test", "ece_l2"): [0.01, 0.02, 0.03],
    ("ce", "none", "test", "accuracy"): [0.78, 0.79, 0.80],
    # beta = 1 wins the selection: same val accuracy, lower val ECE
    **{(m, "none", "val", "accuracy"): [0.8] * 3 for m in SOFT},
    ("sc_nll_mmce_beta_0p5", "none", "val", "ece_l2"): [0.2] * 3,
    ("sc_nll_mmce_beta_1", "none", "val", "ece_l2"): [0.1] * 3,
}


@pytest.fixture(scope="module")
def soft_results():
    seeds = [0, 1, 2]
    return study(SOFT, seeds, tidy(SOFT, seeds, ["ts", "ts_sb_ece"], SOFT_VALUES), SOFT_GROUPS)


def test_karandikar_table_layout_and_cells(soft_results):
    out = build_report("karandikar_table", soft_results)
    table = out["table"]
    assert list(table.columns) == [
        "Primary",
        "Secondary",
        "Accuracy",
        "ECE",
        "ECE+TS",
        "ECE+TS-SB-ECE",
    ]
    assert table[["Primary", "Secondary"]].values.tolist() == [
        ["NLL", "none"],
        ["NLL", "MMCE"],
        ["Focal", "none"],
        ["Focal", "SB-ECE"],
    ]
    assert table.loc[0, "ECE"] == cell([0.09, 0.10, 0.11], "sem")
    assert table.loc[0, "Accuracy"] == cell([0.78, 0.79, 0.80], "sem")
    assert table.loc[1, "ECE"] == cell([0.04, 0.05, 0.07], "sem")  # the selected beta = 1 member
    assert out["selection"]["method"].tolist() == ["sc_nll_mmce_beta_1"]
    grid = out["grid_ece"].set_index("Primary")
    assert grid.columns.tolist() == ["none", "MMCE", "SB-ECE"]
    assert grid.loc["NLL", "MMCE"] == table.loc[1, "ECE"] and pd.isna(grid.loc["NLL", "SB-ECE"])
    assert {"grid_accuracy", "grid_ece_ts", "grid_ece_ts_sb_ece"} <= set(out)
    assert f"**{table.loc[3, 'ECE']}**" in out["karandikar_table"]  # lowest ECE in bold
    # std instead of SEM, and a post-hoc column dropped
    plain = build_report("karandikar_table", soft_results, spread="std", ts_sb_ece=None)["table"]
    assert plain.loc[0, "ECE"] == cell([0.09, 0.10, 0.11]) and "ECE+TS-SB-ECE" not in plain


def test_karandikar_table_loss_mapping_and_failures(soft_results):
    losses = {
        "ce": ["CE", "-"],
        "sc_nll_mmce_beta_1": ["CE", "MMCE"],
        "sc_focal_none": ["FL", "-"],
        "sc_focal_sb_ece": ["FL", "SB-ECE"],
    }
    table = build_report("karandikar_table", soft_results, losses=losses)["table"]
    assert table["Primary"].tolist() == ["CE", "CE", "FL", "FL"]
    with pytest.raises(ValueError, match="share a .primary, secondary. cell"):
        build_report("karandikar_table", soft_results, selection=None)
    with pytest.raises(ValueError, match="missing: \\['sc_focal_sb_ece'\\]"):
        build_report(
            "karandikar_table",
            soft_results,
            losses={k: v for k, v in losses.items() if k != "sc_focal_sb_ece"},
        )
    with pytest.raises(ValueError, match=r"valid calibrator keys: \['ts', 'ts_sb_ece'\]"):
        build_report("karandikar_table", soft_results, ts="ts_nll")
    with pytest.raises(ValueError, match="unknown selection rule"):
        build_report("karandikar_table", soft_results, selection="best")


def test_karandikar_effects_cohens_d_and_p_value(soft_results):
    out = build_report("karandikar_effects", soft_results, calibrators=["none"])
    effects = out["effects"].set_index(["primary", "secondary"])
    none, mmce = np.array([0.09, 0.10, 0.11]), np.array([0.04, 0.05, 0.07])
    pooled = math.sqrt((2 * none.var(ddof=1) + 2 * mmce.var(ddof=1)) / 4)
    row = effects.loc[("NLL", "MMCE")]
    assert row["cohens_d"] == pytest.approx(
        (none.mean() - mmce.mean()) / pooled
    )  # positive: MMCE lowers ECE
    assert row["p_value"] == pytest.approx(
        scipy_stats.ttest_ind(none, mmce, equal_var=False).pvalue
    )
    assert bool(row["significant"]) and row["n_none"] == 3
    assert row["mean_none"] == pytest.approx(10.0) and row["mean_secondary"] == pytest.approx(
        16 / 3
    )  # ×100
    assert sorted(effects.index) == [("Focal", "SB-ECE"), ("NLL", "MMCE")]
    every = build_report("karandikar_effects", soft_results)["effects"]
    assert sorted(set(every["calibrator"])) == ["none", "ts", "ts_sb_ece"]
    assert len(out["effect_sizes"].axes) == 1
    student = build_report(
        "karandikar_effects", soft_results, calibrators=["none"], test="student"
    )["effects"]
    assert student.loc[0, "p_value"] == pytest.approx(scipy_stats.ttest_ind(none, mmce).pvalue)


def test_karandikar_effects_with_one_seed_is_nan_with_a_note():
    values = {k: v[:1] for k, v in SOFT_VALUES.items()}
    results = study(SOFT, [0], tidy(SOFT, [0], ["ts"], values), SOFT_GROUPS)
    effects = build_report("karandikar_effects", results)["effects"]
    assert effects["cohens_d"].isna().all() and effects["p_value"].isna().all()
    assert set(effects["note"]) == {"needs >= 2 seeds per method"}
    with pytest.raises(ValueError, match="valid calibrator keys"):
        build_report("karandikar_effects", results, calibrators=["ts_sb_ece"])
    with pytest.raises(ValueError, match="alpha"):
        build_report("karandikar_effects", results, alpha=0)


# --- Singh et al. ------------------------------------------------------------------------

DARK = {"ce": "CE", "ls_epsilon_0p05": "LS (epsilon=0.05)", "focal_gamma_3": "Focal (gamma=3)"}
DARK_VALUES = {
    ("ce", "none", "test", "auroc"): [0.90, 0.91, 0.92],
    ("ls_epsilon_0p05", "none", "test", "auroc"): [0.70, 0.71, 0.72],  # clearly worse refinement
    ("ce", "none", "test", "ece"): [0.10, 0.11, 0.12],
    ("ls_epsilon_0p05", "none", "test", "ece"): [0.03, 0.04, 0.05],  # better calibrated
    ("ce", "none", "test", "decomp_alpha"): [0.9, 0.9, 0.9],
    ("ce", "none", "test", "decomp_beta"): [0.1, 0.2, 0.3],
    ("ce", "none", "test", "decomp_gamma"): [0.5, 0.5, 0.5],
}


@pytest.fixture(scope="module")
def dark_results():
    seeds = [0, 1, 2]
    logits, calibrators = fitted_runs(DARK, seeds, keys=("ts_fixed",))
    table = tidy(DARK, seeds, ["ts_fixed"], DARK_VALUES, shifts=[("cifar10_1", 0)])
    return study(DARK, seeds, table, logits=logits, calibrators=calibrators)


def test_singh_table_layout_values_and_marks(dark_results):
    out = build_report("singh_table", dark_results)
    table = out["table"]
    assert list(table.columns) == ["Method", "Brier", "ECE", "AUROC", "α", "β", "γ", "α − β − γ"]
    assert table["Method"].tolist() == [
        "CE",
        "CE + ts_fixed",
        "LS (epsilon=0.05)",
        "LS (epsilon=0.05) + ts_fixed",
        "Focal (gamma=3)",
        "Focal (gamma=3) + ts_fixed",
    ]
    assert table.loc[0, "AUROC"] == "91.00 ± 1.00"
    assert table.loc[0, "α − β − γ"] == cell([0.3, 0.2, 0.1])  # alpha - beta - gamma per seed
    comparisons = out["comparisons"].set_index(["method", "metric"])
    assert bool(comparisons.loc[("LS (epsilon=0.05)", "auroc"), "worse"])
    assert not comparisons.loc[("LS (epsilon=0.05)", "ece"), "worse"]  # lower ECE is better
    assert "**71.00 ± 1.00**" in out["singh_table"]
    paper = build_report("singh_table", dark_results, calibrated="baseline")["table"]
    assert paper["Method"].tolist() == [
        "CE",
        "CE + ts_fixed",
        "LS (epsilon=0.05)",
        "Focal (gamma=3)",
    ]


def test_singh_table_shift_tables_and_failures(dark_results):
    out = build_report("singh_table", dark_results, shifts=["none", "cifar10_1"])
    assert {"table", "table_cifar10_1_s0"} <= set(out) and "shift `cifar10_1`" in out["singh_table"]
    with pytest.raises(ValueError, match="unknown shift.*cifar10_1"):
        build_report("singh_table", dark_results, shifts=["cifar10_2"])
    with pytest.raises(ValueError, match="baseline 'erl'"):
        build_report("singh_table", dark_results, baseline="erl")
    with pytest.raises(ValueError, match="calibrated must be one of"):
        build_report("singh_table", dark_results, calibrated="some")


def test_singh_density_histograms(dark_results):
    out = build_report("singh_density", dark_results, bins=10)
    hist = out["histograms"]
    assert set(hist["calibrator"]) == {"none", "ts_fixed"} and len(hist) == 3 * 2 * 2 * 10
    correct = sum(
        int((run["test"]["logits"].argmax(1) == run["test"]["labels"]).sum())
        for (m, _), run in dark_results.logits.items()
        if m == "ce"
    )
    counts = hist[hist["method"] == "ce"].groupby(["calibrator", "outcome"])["count"].sum()
    # temperature scaling keeps every prediction: same correct / incorrect split, seeds pooled
    assert counts["none", "correct"] == counts["ts_fixed", "correct"] == correct
    assert counts["none", "incorrect"] == 3 * 120 - correct
    part = hist[
        (hist["method"] == "ce") & (hist["calibrator"] == "none") & (hist["outcome"] == "correct")
    ]
    assert (part["density"] * (part["upper"] - part["lower"])).sum() == pytest.approx(1.0)
    assert out["confidence_density"].axes[0].get_title().startswith("CE, uncalibrated: AUROC 91.0")
    assert len(out["confidence_density"].axes) == 6


def test_singh_density_failure_paths(dark_results):
    with pytest.raises(ValueError, match=r"valid calibrator keys: \['ts_fixed'\]"):
        build_report("singh_density", dark_results, calibrator="ts")
    with pytest.raises(ValueError, match="bins"):
        build_report("singh_density", dark_results, bins=1)
    with pytest.raises(ValueError, match="needs 'logits'"):
        build_report("singh_density", study(DARK, [0, 1, 2], dark_results.metrics))


# --- registry and saving -----------------------------------------------------------------


def test_needs_are_registered():
    assert report_needs("mukhoti_table") == ("calibrators",)
    assert report_needs("mukhoti_curves") == ("histories",)
    assert (
        report_needs("karandikar_table")
        == report_needs("karandikar_effects")
        == report_needs("singh_table")
        == ()
    )
    assert report_needs("singh_density") == ("logits", "calibrators")


@pytest.mark.parametrize(
    "name, fixture, options",
    [
        ("mukhoti_table", "focal_results", {"selection": "karandikar"}),
        ("mukhoti_curves", "focal_results", {}),
        ("karandikar_table", "soft_results", {}),
        ("karandikar_effects", "soft_results", {}),
        ("singh_table", "dark_results", {}),
        ("singh_density", "dark_results", {}),
    ],
)
def test_every_artifact_is_written(name, fixture, options, request, tmp_path):
    out = build_report(name, request.getfixturevalue(fixture), **options)
    write_artifacts(tmp_path, out)
    expected = sum(2 if isinstance(v, pd.DataFrame) else 1 for v in out.values())
    assert len(list(tmp_path.iterdir())) == expected  # no two artifacts share a file


def test_singh_table_runs_with_a_single_seed():
    # regression: with one seed a per-seed .loc lookup returned a scalar
    from calib_pipeline.calibration.posthoc import build_calibrator
    from calib_pipeline.pipelines.reporting.nodes import evaluate_runs
    from calib_pipeline.pipelines.reporting.reports import StudyResults, build_report

    generator = torch.Generator().manual_seed(1)
    runs = {}
    for method in ("ce", "erl"):
        parts = {}
        for part in ("val", "test"):
            labels = torch.randint(0, 3, (60,), generator=generator)
            parts[part] = {"logits": torch.randn(60, 3, generator=generator) + 2 * torch.nn.functional.one_hot(labels, 3), "labels": labels}
        runs[f"{method}|0"] = {"logits": parts, "calibrators": {"ts_fixed": build_calibrator("temperature_fixed").fit(parts["val"]["logits"], parts["val"]["labels"])}}
    labels = {"ce": "CE", "erl": "ERL"}
    metrics, bins = evaluate_runs(runs, dataset="toy", study="dark_side", labels=labels, calibrators=["ts_fixed"])
    results = StudyResults(study="dark_side", dataset="toy", methods=["ce", "erl"], seeds=[0], labels=labels,
                           groups={"ce": "ce", "erl": "erl"}, metrics=metrics, bins=bins)
    out = build_report("singh_table", results, calibrator="ts_fixed")
    assert "CE" in set(out["table"]["Method"])

"""Wang et al. calibratability reports on a small synthetic study (no Kedro run)."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import ttest_ind

from calib_pipeline.calibration import metrics
from calib_pipeline.calibration.posthoc import build_calibrator, oracle_temperature
from calib_pipeline.reports.common import paper_view, write_artifacts
from calib_pipeline.reports.evaluation import evaluate_runs
from calib_pipeline.reports.registry import StudyResults, build_report, report_needs
from calib_pipeline.reports.wang import compare_to_baseline

# A coarse grid (16 temperatures, T = 1 among them) keeps grid fits fast; the oracle searches
# the same grid, so "oracle ECE <= val-fitted TS ECE" holds exactly.
GRID = [0.25, 4.0, 0.25]
TS = {"name": "temperature_grid_ece", "params": dict(zip(("start", "stop", "step"), GRID))}
HB = {"name": "histogram_binning", "params": {"n_bins": 15}}
# method -> (group, label, logit scale): CE sharp, LS members increasingly flat
METHODS = {
    "ce": ("ce", "CE", 3.0),
    "ls_epsilon_0p01": ("ls", "LS (epsilon=0.01)", 1.2),
    "ls_epsilon_0p05": ("ls", "LS (epsilon=0.05)", 0.5),
}
SEEDS = [0, 1, 2]
N_TRAIN, N_VAL, N_TEST, K, EPOCHS = 240, 150, 300, 5, 3


def _part(n: int, scale: float, generator: torch.Generator) -> dict[str, torch.Tensor]:
    labels = torch.randint(0, K, (n,), generator=generator)
    logits = torch.randn(n, K, generator=generator)
    logits[torch.arange(n), labels] += 1.5
    return {"logits": logits * scale, "labels": labels}


def _run(index: int, seed: int, scale: float, with_epochs: bool) -> dict:
    generator = torch.Generator().manual_seed(100 * index + seed)
    run = {
        part: _part(n, scale, generator)
        for part, n in (("train", N_TRAIN), ("val", N_VAL), ("test", N_TEST))
    }
    # the later a sample was learned, the smaller its max logit (the hardness signal of Fig. 5)
    learned = torch.randint(0, EPOCHS + 1, (N_TRAIN,), generator=generator)
    run["train"]["logits"][:, 0] = 30.0 - 2.0 * learned.float() + 0.01 * torch.arange(N_TRAIN)
    run["learned_epoch"] = learned
    if with_epochs:
        run["epoch_logits"] = {
            "val": [],
            "test": [run["test"]["logits"] * f for f in (0.4, 0.8, 1.6)],
        }
    return run


def _fit(run: dict) -> dict:
    val = run["val"]
    return {
        "ts_grid_wang": build_calibrator(TS["name"], **TS["params"]).fit(
            val["logits"], val["labels"]
        ),
        "hist_binning": build_calibrator(HB["name"], **HB["params"]).fit(
            val["logits"], val["labels"]
        ),
    }


def _study(logits: dict, calibrators: dict, methods: dict = METHODS) -> StudyResults:
    labels = {m: v[1] for m, v in methods.items()}
    table, bins = evaluate_runs(
        {
            f"{m}|{s}": {"logits": logits[(m, s)], "calibrators": calibrators[(m, s)]}
            for m, s in logits
        },
        dataset="synthetic",
        study="calibratability",
        labels=labels,
        calibrators=["ts_grid_wang", "hist_binning"],
    )
    return StudyResults(
        study="calibratability",
        dataset="synthetic",
        methods=list(methods),
        seeds=SEEDS,
        labels=labels,
        groups={m: v[0] for m, v in methods.items()},
        metrics=table,
        bins=bins,
        logits=logits,
        calibrators=calibrators,
    )


@pytest.fixture(scope="module")
def study() -> StudyResults:
    logits = {
        (m, s): _run(i, s, scale, with_epochs=m == "ce")
        for i, (m, (_, _, scale)) in enumerate(METHODS.items())
        for s in SEEDS
    }
    return _study(logits, {key: _fit(run) for key, run in logits.items()})


@pytest.fixture(scope="module")
def table(study: StudyResults) -> dict:
    return build_report("calibratability_table", study, oracle_grid=GRID)


def _test_ece(study: StudyResults, method: str, calibrator: str) -> np.ndarray:
    rows = study.metrics[
        (study.metrics["method"] == method)
        & (study.metrics["calibrator"] == calibrator)
        & (study.metrics["split"] == "test")
        & (study.metrics["metric"] == "ece")
    ]
    return rows.sort_values("seed")["value"].to_numpy() * 100


def test_reports_are_registered_with_their_needs():
    assert report_needs("calibratability_table") == ("logits", "calibrators")
    assert report_needs("validation_size_sweep") == ("logits",)
    assert report_needs("optimal_ece_per_epoch") == ("logits",)
    assert report_needs("max_logit_histograms") == ("logits",)


def test_calibratability_table_layout(study, table):
    main = table["calibratability"]
    assert "ece_after_ts_grid_wang_pct_mean" in main and "t_of_ts_grid_wang_std" in main
    assert list(paper_view(main).columns) == [
        "group",
        "method",
        "label",
        "selection",
        "ECE (%) uncalibrated",
        "ECE (%) after ts_grid_wang",
        "T of ts_grid_wang",
        "ECE (%) after hist_binning",
    ]
    assert main["method"].tolist() == list(METHODS)
    assert not any(
        "ORACLE" in c for c in main.columns
    )  # oracle numbers never share the val-fitted table
    assert "ORACLE ECE (%), T searched on test" in table["oracle"].columns
    # the cells agree with the evaluation's tidy table (same ECE, 15 bins) and the fitted T
    ce = _test_ece(study, "ce", "ts_grid_wang")
    assert main.loc[0, "ECE (%) after ts_grid_wang"].startswith(
        f"{ce.mean():.2f} ± {ce.std(ddof=1):.2f}"
    )
    temperatures = [study.calibrators[("ce", s)]["ts_grid_wang"].temperature for s in SEEDS]
    assert (
        main.loc[0, "T of ts_grid_wang"]
        == f"{np.mean(temperatures):.2f} ± {np.std(temperatures, ddof=1):.2f}"
    )
    markdown = table["calibratability_table"]
    assert "ORACLE bound" in markdown and "two-sample Student t-test" in markdown
    assert markdown.index("## Oracle bound") > markdown.index("ECE (%) after hist_binning")


def test_test_selected_member_is_the_lowest_uncalibrated_test_ece(study, table):
    means = {m: _test_ece(study, m, "none").mean() for m in ("ls_epsilon_0p01", "ls_epsilon_0p05")}
    best = min(means, key=means.get)
    main = table["calibratability"].set_index("method")
    assert main.loc[best, "selection"] == "test-selected"
    assert (main["selection"] == "test-selected").sum() == 1  # CE is not swept: nothing to select
    assert table["selection"]["method"].tolist() == [best]


def test_excluded_members_are_shown_but_never_test_selected(study):
    """Wang §3 leaves the L1 settings that fail to train out of the choice: `exclude`."""
    means = {m: _test_ece(study, m, "none").mean() for m in ("ls_epsilon_0p01", "ls_epsilon_0p05")}
    best = min(means, key=means.get)
    other = next(m for m in means if m != best)
    out = build_report("calibratability_table", study, exclude=[best])
    main = out["calibratability"].set_index("method")
    assert best in main.index and main.loc[best, "selection"] != "test-selected"
    assert best not in set(out["selection"]["method"]) and other in main.index
    with pytest.raises(ValueError, match=r"exclude: \['ls_epsilon_0p5'\] are not methods"):
        build_report("calibratability_table", study, exclude=["ls_epsilon_0p5"])


def test_oracle_ece_never_exceeds_val_fitted_ts_on_the_same_grid(study, table):
    runs = table["calibratability_runs"]
    ece = runs[runs["quantity"] == "ece"].pivot(
        index=["method", "seed"], columns="calibrator", values="value"
    )
    assert (ece["oracle"] <= ece["ts_grid_wang"] + 1e-6).all()
    assert (ece["oracle"] <= ece["none"] + 1e-6).all()  # T = 1 is on the grid
    z, y = study.logits[("ce", 1)]["test"]["logits"], study.logits[("ce", 1)]["test"]["labels"]
    assert ece.loc[("ce", 1), "oracle"] == pytest.approx(
        100 * oracle_temperature(z, y, grid=GRID)["oracle_ece"]
    )


def test_t_test_marks_direction_and_parity_with_scipy():
    base = [1.0, 1.2, 0.8, 1.1]
    values = {
        "ce": base,
        "worse": [3.0, 3.2, 2.9, 3.1],
        "better": [0.2, 0.3, 0.1, 0.25],
        "same": [1.05, 0.95, 1.15, 0.9],
    }
    runs = pd.DataFrame(
        [
            {"method": m, "seed": s, "calibrator": "none", "quantity": "ece", "value": v}
            for m, vs in values.items()
            for s, v in enumerate(vs)
        ]
        + [{"method": "single", "seed": 0, "calibrator": "none", "quantity": "ece", "value": 9.0}]
    )
    out = compare_to_baseline(runs, "ce", 0.05).set_index("method")
    assert out["mark"].to_dict() == {
        "ce": "",
        "worse": "▲",
        "better": "▼",
        "same": "▽",  # mean 1.0125 < 1.025: lower, not significantly (hollow)
        "single": "",
    }
    assert out.loc["worse", "p_value"] == pytest.approx(ttest_ind(values["worse"], base).pvalue)
    assert out.loc["same", "p_value"] > 0.05
    assert np.isnan(out.loc["single", "p_value"]) and np.isnan(out.loc["ce", "p_value"])


def test_marks_reach_the_table(table):
    # LS members are far flatter than CE: uncalibrated ECE much higher, significant
    main = table["calibratability"].set_index("method")
    assert main.loc["ls_epsilon_0p05", "ECE (%) uncalibrated"].endswith("▲")
    assert not main.loc["ce", "ECE (%) uncalibrated"].endswith(("▲", "▼", "△", "▽"))


def test_calibratability_table_bad_options(study):
    with pytest.raises(
        ValueError, match=r"unknown calibrator key\(s\) \['ts'\].*hist_binning, ts_grid_wang"
    ):
        build_report("calibratability_table", study, calibrators=["ts"])
    with pytest.raises(ValueError, match=r"baseline: \['focal'\] are not methods"):
        build_report("calibratability_table", study, baseline="focal")
    with pytest.raises(ValueError, match="select_by must be one of"):
        build_report(
            "calibratability_table", study, calibrators=["hist_binning"], select_by="ts_grid_wang"
        )
    with pytest.raises(ValueError, match="alpha"):
        build_report("calibratability_table", study, alpha=1.5)


def test_a_missing_run_is_named(study):
    partial = StudyResults(
        **{**study.__dict__, "logits": {k: v for k, v in study.logits.items() if k != ("ce", 2)}}
    )
    with pytest.raises(ValueError, match=r"'logits' of 'ce' seed 2"):
        build_report("max_logit_histograms", partial)


def test_validation_size_sweep(study, tmp_path):
    out = build_report(
        "validation_size_sweep",
        study,
        sizes=[10, 40, "all", 10_000],
        subsample_seeds=[0, 1],
        calibrators={"ts_grid_wang": TS, "hist_binning": HB},
    )
    table = out["validation_size"]
    assert list(paper_view(table).columns) == [
        "group",
        "method",
        "label",
        "calibrator",
        "10",
        "40",
        "all",
    ]
    assert {"10_pct_mean", "all_pct_std", "n_fits"} <= set(table.columns)
    assert table[["method", "calibrator"]].values.tolist() == [
        [m, c] for m in METHODS for c in ("ts_grid_wang", "hist_binning")
    ]
    stats = out["validation_size_stats"].set_index(["method", "calibrator", "size_label"])
    assert stats.loc[("ce", "ts_grid_wang", "10"), "n"] == len(SEEDS) * 2
    assert stats.loc[("ce", "ts_grid_wang", "all"), "n"] == len(
        SEEDS
    )  # one fit: every subsample is the split
    # fitting on the whole split reproduces the stored calibrators' test ECE
    full = _test_ece(study, "ls_epsilon_0p01", "ts_grid_wang").mean()
    assert stats.loc[("ls_epsilon_0p01", "ts_grid_wang", "all"), "mean"] == pytest.approx(
        full, abs=1e-4
    )
    assert "size 10000 skipped" in out["validation_size_sweep_md"]
    assert isinstance(out["validation_size_sweep"], plt.Figure)
    write_artifacts(tmp_path, out)
    assert {p.name for p in tmp_path.iterdir()} >= {
        "validation_size.csv",
        "validation_size_sweep.png",
        "validation_size_sweep_md.md",
    }


def test_validation_size_sweep_bad_options(study):
    with pytest.raises(
        ValueError, match=r"sizes\[1\] must be an integer >= 1 or one of 'all', got 'half'"
    ):
        build_report("validation_size_sweep", study, sizes=[10, "half"])
    with pytest.raises(
        ValueError, match="calibrator 'x': unknown calibrator 'platt'; valid calibrator names"
    ):
        build_report("validation_size_sweep", study, calibrators={"x": {"name": "platt"}})
    with pytest.raises(ValueError, match="larger than the validation split"):
        build_report("validation_size_sweep", study, sizes=[10_000])


def test_optimal_ece_per_epoch_skips_methods_without_epoch_logits(study):
    out = build_report("optimal_ece_per_epoch", study, grid=GRID, epoch_stride=2)
    runs = out["optimal_ece_runs"]
    assert set(runs["method"]) == {"ce"}
    assert sorted(set(runs["epoch"])) == [1, 3]  # stride 2, and always the last epoch
    markdown = out["optimal_ece_per_epoch_md"]
    assert "skipped `ls_epsilon_0p01`" in markdown and "skipped `ls_epsilon_0p05`" in markdown
    assert (runs["oracle_ece"] <= runs["raw_ece"] + 1e-6).all()
    last = study.logits[("ce", 0)]["epoch_logits"]["test"][-1]
    row = runs[(runs["seed"] == 0) & (runs["epoch"] == 3)].iloc[0]
    assert row["oracle_ece"] == pytest.approx(
        100
        * oracle_temperature(last, study.logits[("ce", 0)]["test"]["labels"], grid=GRID)[
            "oracle_ece"
        ]
    )
    assert row["raw_ece"] == pytest.approx(
        100 * float(metrics.ece(last, study.logits[("ce", 0)]["test"]["labels"]))
    )
    summary = out["optimal_ece"]
    assert (summary["oracle_ece_min"] <= summary["oracle_ece_mean"]).all()
    assert isinstance(out["optimal_ece_per_epoch"], plt.Figure)


def test_optimal_ece_per_epoch_without_any_epoch_logits(study):
    no_epochs = {
        k: {p: v for p, v in run.items() if p != "epoch_logits"} for k, run in study.logits.items()
    }
    out = build_report(
        "optimal_ece_per_epoch", StudyResults(**{**study.__dict__, "logits": no_epochs})
    )
    assert list(out) == ["optimal_ece_per_epoch_md"]
    assert "No method recorded per-epoch test logits" in out["optimal_ece_per_epoch_md"]
    with pytest.raises(ValueError, match="epoch_stride must be an integer >= 1, got 0"):
        build_report("optimal_ece_per_epoch", study, epoch_stride=0)


def test_max_logit_histograms(study):
    out = build_report("max_logit_histograms", study, epoch_bins=[1, 2, 4], logit_bins=20)
    by_bin = out["max_logit_by_learned_epoch"]
    assert by_bin.groupby("method")["count"].sum().tolist() == [N_TRAIN * len(SEEDS)] * len(METHODS)
    assert by_bin[by_bin["method"] == "ce"]["learned_epochs"].tolist() == [
        "never learned",
        "1",
        "2–3",
    ]
    learned = torch.cat([study.logits[("ce", s)]["learned_epoch"] for s in SEEDS])
    counts = by_bin[by_bin["method"] == "ce"].set_index("learned_epochs")["count"]
    assert counts["2–3"] == int(((learned >= 2) & (learned <= 3)).sum())
    # the max logit falls with the learned epoch by construction
    rho = out["hardness_correlation"].set_index("method")["Spearman(learned epoch, max logit)"]
    assert all(float(cell.split(" ")[0]) < -0.9 for cell in rho)
    assert isinstance(out["max_logit_histograms"], plt.Figure)


def test_max_logit_histograms_bad_input(study):
    with pytest.raises(ValueError, match="starting at 1"):
        build_report("max_logit_histograms", study, epoch_bins=[2, 4])
    with pytest.raises(ValueError, match="must end above the last learned epoch 3"):
        build_report("max_logit_histograms", study, epoch_bins=[1, 2, 3])
    broken = dict(study.logits)
    broken[("ce", 0)] = {**broken[("ce", 0)], "learned_epoch": torch.zeros(5, dtype=torch.long)}
    with pytest.raises(
        ValueError, match="learned_epoch has 5 entries but the train split has 240 rows"
    ):
        build_report("max_logit_histograms", StudyResults(**{**study.__dict__, "logits": broken}))


def test_max_logit_histograms_leave_out_runs_without_learned_epochs(study):
    untracked = {
        key: {**run, "learned_epoch": torch.full((N_TRAIN,), -1)} if key[0] == "ce" else run
        for key, run in study.logits.items()
    }
    with pytest.warns(UserWarning, match=r"ce seed \d: left out of the learned-epoch analysis"):
        out = build_report(
            "max_logit_histograms", StudyResults(**{**study.__dict__, "logits": untracked})
        )
    assert "ce" not in set(out["max_logit_by_learned_epoch"]["method"])
    assert set(out["max_logit_by_learned_epoch"]["method"]) == set(METHODS) - {"ce"}
    nothing = {
        key: {**run, "learned_epoch": torch.full((N_TRAIN,), -1)}
        for key, run in study.logits.items()
    }
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=r"no run of study .* tracked"):
        build_report("max_logit_histograms", StudyResults(**{**study.__dict__, "logits": nothing}))


def test_excluded_members_outside_the_study_are_refused_before_any_training():
    """conf/cifar100 excludes two L1 settings; a calibratability study without that sweep
    must fail when the pipelines are built, not after every run has trained."""
    from calib_pipeline.reports.registry import StudyOutline, check_report

    outline = StudyOutline(
        "calibratability", ("ce", "ls_epsilon_0p05"), {}, ("ts_grid_wang", "hist_binning")
    )
    with pytest.raises(ValueError, match=r"exclude: \['l1_norm_alpha_0p05'\] are not methods"):
        check_report("calibratability_table", {"exclude": ["l1_norm_alpha_0p05"]}, study=outline)
    with pytest.raises(ValueError, match=r"baseline: \['cross_entropy'\] are not methods"):
        check_report("calibratability_table", {"baseline": "cross_entropy"}, study=outline)
    check_report("calibratability_table", {"exclude": ["ls_epsilon_0p05"]}, study=outline)

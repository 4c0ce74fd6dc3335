"""Reports of the meta-regularisation study (γ-Net + SECE): Tables 1–2, Fig. 3, 5, γ histogram."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from calib_pipeline.calibration.metrics import calibration_metrics_batched  # noqa: E402
from calib_pipeline.pipelines.reporting.reports import StudyResults, report  # noqa: E402
from calib_pipeline.pipelines.reporting.tables import mean_std_table  # noqa: E402

TABLE_METRICS = ["error", "nll", "ece", "mce", "ece_em", "classwise_ece"]
TABLE_HEADERS = {"label": "Methods", "error": "Error", "nll": "NLL", "ece": "ECE", "mce": "MCE",
                 "ece_em": "ACE", "classwise_ece": "Classwise ECE"}
BIN_COUNTS = [10, 20, 50, 100, 200, 500, 1000]


def _paper_table(results: StudyResults, methods: list[str], calibrated: dict[str, str] | None) -> pd.DataFrame:
    """Rows in the paper's order: each method uncalibrated, with ``calibrated`` = {method:
    calibrator} rows (e.g. CE + TS) right after their method."""
    table = results.metrics
    unknown = sorted(set(methods) - set(table["method"]))
    if unknown:
        raise ValueError(f"methods {unknown} are not in the study's table; it has {sorted(table['method'].unique())}")
    pieces = []
    for method in methods:
        rows = table[(table["method"] == method) & (table["calibrator"] == "none")]
        pieces.append(rows)
        calibrator = (calibrated or {}).get(method)
        if calibrator is not None:
            cal_rows = table[(table["method"] == method) & (table["calibrator"] == calibrator)]
            if cal_rows.empty:
                raise ValueError(
                    f"calibrator {calibrator!r} was not evaluated for {method!r}; evaluated: "
                    f"{sorted(table.loc[table['method'] == method, 'calibrator'].unique())}"
                )
            pieces.append(cal_rows.assign(label=cal_rows["label"] + f" ({calibrator.upper()})", calibrator="none"))
    wide = mean_std_table(pd.concat(pieces), TABLE_METRICS)
    return wide.drop(columns="calibrator").rename(columns=TABLE_HEADERS)


@report("meta_tables")
def meta_tables(
    results: StudyResults,
    calibrated: dict[str, str] | None = None,
    ablation: list[str] | None = None,
) -> dict[str, Any]:
    """Table 1 (every method; ``calibrated`` adds e.g. {fm_ce: ts} as "CE (TS)") and Table 2
    (the ``ablation`` pair, FL_γ vs FL_γ-SECE): Error, NLL, ECE, MCE, ACE (adaptive,
    equal-mass), classwise ECE on the test split, mean ± std over seeds, % except NLL."""
    table1 = _paper_table(results, results.methods, calibrated)
    out: dict[str, Any] = {"table1": table1}
    text = [f"# {results.study} on {results.dataset}: Table 1\n", table1.to_markdown(index=False)]
    if ablation:
        table2 = _paper_table(results, ablation, None)
        out["table2"] = table2
        text += ["\n\n## Table 2: calibration gain of the meta loss\n", table2.to_markdown(index=False)]
    out["tables"] = "\n".join(text) + "\n"
    return out


@report("meta_curves", needs=("histories",))
def meta_curves(results: StudyResults) -> dict[str, Any]:
    """Fig. 3: test ECE per epoch for every method (a–b) and the mean / std of the learned γ
    on test (and val) per epoch for the γ-Net methods (c–d), averaged over seeds."""
    frames = [h.assign(label=results.labels[m]) for (m, _), h in results.histories.items()]
    if not frames:
        raise ValueError("meta_curves needs the runs' histories")
    history = pd.concat(frames, ignore_index=True)
    columns = [c for c in ("test_ece", "test_error", "test_gamma_mean", "test_gamma_std",
                           "val_gamma_mean", "val_gamma_std") if c in history.columns]
    if "test_accuracy" in history:
        history["test_error"] = 1.0 - history["test_accuracy"]
        columns = sorted(set(columns) | {"test_error"})
    curves = history.groupby(["label", "epoch"], sort=False)[columns].mean().reset_index()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    colours = plt.cm.tab20.colors  # more methods than the default 10-colour cycle
    for index, (label, frame) in enumerate(curves.groupby("label", sort=False)):
        colour = colours[index % len(colours)]
        axes[0].plot(frame["epoch"], 100 * frame["test_ece"], label=label, color=colour)
        if "test_gamma_mean" in frame and frame["test_gamma_mean"].notna().any():
            axes[1].plot(frame["epoch"], frame["test_gamma_mean"], label=label, color=colour)
            axes[2].plot(frame["epoch"], frame["test_gamma_std"], label=label, color=colour)
    axes[0].set(title="test ECE (%) per epoch", xlabel="epoch", ylabel="ECE (%)")
    axes[1].set(title="mean of γ on test", xlabel="epoch", ylabel="mean γ")
    axes[2].set(title="std of γ on test", xlabel="epoch", ylabel="std γ")
    axes[0].legend(fontsize=7)
    if axes[1].lines:
        axes[1].legend(fontsize=7)
    fig.tight_layout()
    return {"curves": curves, "figure3": fig}


def _test_logits(results: StudyResults) -> dict[str, list[tuple[Any, Any]]]:
    by_method: dict[str, list[tuple[Any, Any]]] = {}
    for (method, _), run in sorted(results.logits.items()):
        by_method.setdefault(method, []).append((run["test"]["logits"], run["test"]["labels"]))
    if not by_method:
        raise ValueError("this report needs the runs' logits")
    return by_method


@report("bin_robustness", needs=("logits",))
def bin_robustness(results: StudyResults, n_bins: list[int] | None = None) -> dict[str, Any]:
    """Fig. 5: test ECE and MCE of every method for bin counts 10 … 1000 (mean over seeds)."""
    import torch

    counts = n_bins or BIN_COUNTS
    rows = []
    for method, runs in _test_logits(results).items():
        logits = torch.stack([l for l, _ in runs])
        labels = torch.stack([y for _, y in runs])
        for count in counts:
            values = calibration_metrics_batched(logits, labels, n_bins=count, keys=["ece", "mce"])
            rows.append({"method": method, "label": results.labels[method], "n_bins": count,
                         "ece": float(np.mean(values["ece"])), "mce": float(np.mean(values["mce"]))})
    table = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colours = plt.cm.tab20.colors
    for index, (label, frame) in enumerate(table.groupby("label", sort=False)):
        colour = colours[index % len(colours)]
        axes[0].plot(frame["n_bins"], 100 * frame["ece"], marker="o", label=label, color=colour)
        axes[1].plot(frame["n_bins"], 100 * frame["mce"], marker="o", label=label, color=colour)
    for ax, name in zip(axes, ("ECE", "MCE")):
        ax.set(xscale="log", xlabel="number of bins", ylabel=f"{name} (%)", title=f"test {name} vs number of bins")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return {"ece_mce_vs_bins": table, "figure5": fig}


@report("gamma_histogram", needs=("logits",))
def gamma_histogram(results: StudyResults, bins: int = 40) -> dict[str, Any]:
    """Histogram of the learned per-sample γ on the test set for every γ-Net method (seeds pooled)."""
    import torch

    gammas: dict[str, np.ndarray] = {}
    for (method, _), run in sorted(results.logits.items()):
        if "gamma_test" in run:
            values = torch.as_tensor(run["gamma_test"]).double().numpy()
            gammas[results.labels[method]] = np.concatenate([gammas.get(results.labels[method], np.empty(0)), values])
    if not gammas:
        raise ValueError("no run of this study has learned γ values (γ-Net methods store gamma_test)")
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, values in gammas.items():
        ax.hist(values, bins=bins, alpha=0.55, label=label)
    ax.set(xlabel="learned γ on test", ylabel="samples", title="distribution of the learned focal γ")
    ax.legend(fontsize=8)
    summary = pd.DataFrame(
        [{"label": k, "mean": v.mean(), "std": v.std(), "min": v.min(), "median": np.median(v), "max": v.max()}
         for k, v in gammas.items()]
    )
    return {"gamma_summary": summary, "gamma_histogram": fig}

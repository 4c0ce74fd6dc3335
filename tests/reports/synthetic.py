"""Synthetic study results for the report tests: tidy tables, fitted runs, expected cells."""

import math

import numpy as np
import pandas as pd
import torch

from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.reports.registry import StudyResults

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
                                "run_id": f"run-{method}-{seed}",
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
    # mean val accuracy: 0.90, 0.892 (0.8 points below: eligible), 0.87 (excluded)
    ("ls_epsilon_0p01", "none", "val", "accuracy"): [0.899, 0.901],
    ("ls_epsilon_0p03", "none", "val", "accuracy"): [0.887, 0.897],  # 0.8 points below
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


def ls_table():
    return tidy(LS, [0, 1], ["ts"], LS_VALUES)


# --- Mukhoti et al. ----------------------------------------------------------------------

FOCAL = {"ce": "CE", "focal_gamma_1": "Focal (gamma=1)", "focal_gamma_3": "Focal (gamma=3)"}
FOCAL_GROUPS = {"focal_gamma_1": "focal", "focal_gamma_3": "focal"}
FOCAL_VALUES = {
    ("ce", "none", "test", "ece"): [0.10, 0.12, 0.14],
    ("ce", "ts_grid", "test", "ece"): [0.02, 0.03, 0.04],
    ("ce", "none", "test", "error"): [0.20, 0.25, 0.30],
}


def focal_study():
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


def soft_study():
    seeds = [0, 1, 2]
    return study(SOFT, seeds, tidy(SOFT, seeds, ["ts", "ts_sb_ece"], SOFT_VALUES), SOFT_GROUPS)


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


def dark_study():
    seeds = [0, 1, 2]
    logits, calibrators = fitted_runs(DARK, seeds, keys=("ts_fixed",))
    table = tidy(DARK, seeds, ["ts_fixed"], DARK_VALUES, shifts=[("cifar10_1", 0)])
    return study(DARK, seeds, table, logits=logits, calibrators=calibrators)


def reliability_bins(labels, seeds, calibrators=("none", "ts"), n_bins=15, n=400):
    """A per-bin reliability table as the evaluation writes it: per (method, seed,
    calibrator), ``n`` random predictions binned by confidence (empty bins have NaN
    accuracy and confidence, as in the real table)."""
    rng = np.random.default_rng(1)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    frames = []
    for method, label in labels.items():
        for seed in seeds:
            for cal in calibrators:
                conf = rng.beta(5, 1.5, n)
                correct = rng.random(n) < conf ** (1.3 if cal == "none" else 1.0)
                index = np.clip(np.digitize(conf, edges[1:-1]), 0, n_bins - 1)
                count = np.bincount(index, minlength=n_bins)
                with np.errstate(invalid="ignore"):
                    confidence = np.bincount(index, conf, n_bins) / count
                    accuracy = np.bincount(index, correct, n_bins) / count
                frames.append(
                    pd.DataFrame(
                        {
                            "method": method,
                            "label": label,
                            "seed": seed,
                            "run_id": f"run-{method}-{seed}",
                            "calibrator": cal,
                            "n_bins": n_bins,
                            "lower": edges[:-1],
                            "upper": edges[1:],
                            "count": count,
                            "confidence": confidence,
                            "accuracy": accuracy,
                        }
                    )
                )
    return pd.concat(frames, ignore_index=True)


def parse_architecture_tag(tag: str) -> tuple[str, dict]:
    """``resnet32[shortcut=zero_pad]`` -> ``("resnet32", {"shortcut": "zero_pad"})``: the
    inverse of ``models.architecture_tag`` for the tags the shipped files hold."""
    name, _, options = tag.partition("[")
    params = dict(option.split("=") for option in options.rstrip("]").split(",") if option)
    return name, {k: int(v) if v.isdigit() else v for k, v in params.items()}

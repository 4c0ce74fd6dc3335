"""Is a protocol in the papers' regime? CE's NLL-TS temperature and test NLL over epochs.

The papers' phenomena need an overconfident CE model whose test NLL overfits late in
training. This script trains one method (default ``fm_ce``, the CE run of ``make run``'s
focal_meta study: meta split, best-val-error selection) exactly as the training node does
(``run_configuration``: the environment's model and training parameters under the method's
overrides), for the shipped protocol and candidate protocols, and prints per seed: the
NLL-TS temperature fitted on val logits of the selected epoch, test NLL before/after TS,
test accuracy, the selected epoch, the epoch of minimum test NLL vs the last epoch, the
test-NLL rise from its minimum to the last epoch, and wall and CPU seconds per run -- the
evidence for the protocols in docs/protocols.md (issue 16, items 4 and 5). Nothing is tuned
on test data: the split seed is fixed and TS is fitted on val. Numbers depend on the torch
thread count (lr 0.1 without weight decay amplifies rounding differences): compare
candidates at one setting.

    OMP_NUM_THREADS=1 python benchmarks/digits_regime.py --seeds 0 1 2 3   # shipped + candidates
    OMP_NUM_THREADS=1 python benchmarks/digits_regime.py --only base --trace
    python benchmarks/digits_regime.py --training '{"weight_decay": 5e-4}' \\
        --model-params '{"name": "small_cnn"}'
    python benchmarks/digits_regime.py --env fashion_mnist --method ce --seeds 0 --trace
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from calib_pipeline.calibration.methods import build_method
from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.data import load_dataset
from calib_pipeline.data.splits import split_dataset, split_tensors
from calib_pipeline.models import build_model
from calib_pipeline.pipelines.config import parse_structure
from calib_pipeline.settings import data_root, load_parameters
from calib_pipeline.training import Split, TrainConfig, train_model
from calib_pipeline.training.provenance import run_configuration

WD0 = {"weight_decay": 0.0}
FORMER = {"weight_decay": 5e-4, "lr": 0.05, "milestones": [10, 16]}  # the default before issue 16
# name -> (training overrides, model params overrides; "name" replaces the architecture),
# applied over the environment's. The results on digits are in docs/protocols.md.
CANDIDATES = {
    "base": ({}, {}),
    "former_default": (FORMER, {"name": "small_cnn"}),
    "small_cnn_wd0_b64_e120": (
        {**WD0, "batch_size": 64, "epochs": 120, "milestones": [60, 90]},
        {"name": "small_cnn"},
    ),
    "small_cnn_wd0_b32_e40": (
        {**WD0, "batch_size": 32, "epochs": 40, "milestones": [20, 30]},
        {"name": "small_cnn"},
    ),
    "resnet20_wd0_e20": ({}, {"name": "resnet20"}),
    "resnet20_wd0_e24": ({"epochs": 24, "milestones": [16, 20]}, {"name": "resnet20"}),
    "pool_grid4_wd0": ({}, {"name": "small_cnn", "pool_grid": 4}),
    "dense_wd5e-4_lr0.05": (FORMER, {}),
    "dense_wd0_lr0.05": ({"lr": 0.05, "milestones": [10, 16]}, {}),
    "dense_wd0_drops_4_12": ({"milestones": [4, 12]}, {}),
}


def nll(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float(torch.nn.functional.cross_entropy(logits.double(), labels))


def run(
    params: dict,
    method_key: str,
    candidate: tuple[dict, dict],
    seed: int,
    data,
    trace: bool = False,
) -> dict:
    """Train ``method_key`` under ``params`` with the candidate's overrides, as the pipeline does.
    A ``name`` among the candidate's model params replaces the architecture (and its params)."""
    training, model_params = candidate
    method = parse_structure(params).methods[method_key]
    model_params = dict(model_params)
    name = model_params.pop("name", None)
    base_params = (params["model"].get("params") or {}) if name is None else {}
    model_config = {
        "name": name or params["model"]["name"],
        "params": {**base_params, **model_params},
    }
    config = run_configuration(
        method,
        seed=seed,
        dataset=data.name,
        split_definition=params["splits"][method.split],
        model_params=model_config,
        training_params={**params["training"], **training},
    )
    split = split_dataset(data, params["splits"][method.split])
    torch.manual_seed(seed)
    model = build_model(
        config["model"]["name"],
        in_channels=data.in_channels,
        num_classes=data.num_classes,
        image_size=data.image_size,
        **(config["model"].get("params") or {}),
    )
    learner = build_method(method, num_classes=data.num_classes, feature_dim=model.feature_dim)
    parts = {p: Split(*split_tensors(data, split, p)) for p in [*split, "test"]}
    started, cpu_started = time.perf_counter(), time.process_time()
    training_config = TrainConfig.from_params({**config["training"], "device": "cpu"})
    result = train_model(
        model,
        learner,
        parts["train"],
        parts["val"],
        training_config,
        normalization=(data.mean, data.std),
        seed=seed,
        test=parts["test"],
        meta_val=parts.get("meta_val"),
        record_epoch_logits=True,
    )
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    chosen = result.selected_epoch - 1
    val_logits, test_logits = (
        result.epoch_logits["val"][chosen],
        result.epoch_logits["test"][chosen],
    )
    temperature = (
        build_calibrator("temperature_nll").fit(val_logits, parts["val"].labels).temperature
    )
    test_nll = [row["test_nll"] for row in result.history]
    if trace:
        _print_trace(result, parts["val"].labels)
    return {
        "T": temperature,
        "nll": nll(test_logits, parts["test"].labels),
        "nll_ts": nll(test_logits / temperature, parts["test"].labels),
        "acc": float((test_logits.argmax(1) == parts["test"].labels).float().mean()),
        "selected": result.selected_epoch,
        "min_nll_epoch": test_nll.index(min(test_nll)) + 1,
        "epochs": len(test_nll),
        "nll_rise": test_nll[-1] - min(test_nll),
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }


def _print_trace(result, val_labels: torch.Tensor) -> None:
    """Per epoch: learning rate, train loss and accuracy, val errors, that epoch's NLL-TS
    temperature, test NLL and accuracy, seconds."""
    print("  epoch      lr  train_loss  train_acc  val_err      T  test_nll  test_acc   s")
    for epoch, (row, val_logits) in enumerate(
        zip(result.history, result.epoch_logits["val"]), start=1
    ):
        errors = int((val_logits.argmax(1) != val_labels).sum())
        temperature = build_calibrator("temperature_nll").fit(val_logits, val_labels).temperature
        train_accuracy = row.get("train_accuracy", float("nan"))
        print(
            f"  {epoch:5d} {row['lr']:7.4f} {row['train_loss']:11.4f} {train_accuracy:10.4f} "
            f"{errors:8d} {temperature:6.3f} {row['test_nll']:9.4f} {row['test_accuracy']:9.4f} "
            f"{row['seconds']:5.1f}"
        )


def _merged(base: dict, update: dict) -> dict:
    """``update`` merged into ``base`` key by key (nested mappings merged, other values
    replaced)."""
    merged = dict(base)
    for key, value in update.items():
        nested = isinstance(value, dict) and isinstance(base.get(key), dict)
        merged[key] = _merged(base[key], value) if nested else value
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--env", default="local", help="parameters of this environment (default: base)"
    )
    parser.add_argument(
        "--method", default="fm_ce", help="a method key (default: make run's CE, fm_ce)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument(
        "--only", nargs="*", default=None, help=f"candidates (default: all of {list(CANDIDATES)})"
    )
    parser.add_argument(
        "--training",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="a custom candidate's training overrides, e.g. '{\"epochs\": 60}'",
    )
    parser.add_argument(
        "--model-params",
        type=json.loads,
        default={},
        metavar="JSON",
        help='its model params; "name" picks another architecture',
    )
    parser.add_argument(
        "--params",
        type=json.loads,
        default={},
        metavar="JSON",
        help="merged into the environment's parameters, e.g. "
        '\'{"splits": {"standard": {"subset": 6000}}}\'',
    )
    parser.add_argument(
        "--trace", action="store_true", help="print every epoch's val errors, T and test NLL"
    )
    args = parser.parse_args()
    params = _merged(load_parameters(args.env), args.params)
    data = load_dataset(params["dataset"]["name"], root=Path(data_root()) / "01_raw")
    print(f"env {args.env}, method {args.method}, torch threads {torch.get_num_threads()}")
    print(
        f"{'candidate':24s} seed      T   NLL  NLL-TS   acc  sel  min-NLL/last  NLL rise   s/run  "
        "cpu s/run"
    )
    candidates = (
        {"custom": (args.training, args.model_params)} if args.training is not None else CANDIDATES
    )
    for name, candidate in candidates.items():
        if args.only and name not in args.only:
            continue
        for seed in args.seeds:
            r = run(params, args.method, candidate, seed, data, args.trace)
            print(
                f"{name:24s} {seed:4d} {r['T']:6.3f} {r['nll']:.4f} {r['nll_ts']:.4f} "
                f"{r['acc']:.4f} {r['selected']:4d} {r['min_nll_epoch']:>6d}/{r['epochs']:<4d} "
                f"{r['nll_rise']:9.4f} {r['seconds']:7.1f} {r['cpu_seconds']:10.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""Cost of each training objective: time per SGD step relative to cross-entropy.

One step = (mixup batch mixing where the objective has it) + forward + objective +
backward + SGD step, on the same batch and the same small CNN (one copy per objective,
all from the same initial weights). Every block of ``--steps`` steps of an objective is
timed right after a block of cross-entropy steps; the table gives the median over
``--repeats`` rounds of the time per step and of the paired ratio. A second pair of
columns times the objective alone (loss on fixed logits + backward to the logits), which
shows the overhead that the step ratio dilutes; "derived x CE" = 1 + (objective alone -
CE alone) / (CE step) is the step ratio implied by that overhead, robust to the load noise
that the directly measured step ratio suffers from on a shared machine.
Targets (issue 4): elementwise losses <= 1.05x CE; MMCE / SB-ECE / S-AvUC <= 1.3x CE,
per training step.

Usage:
    python benchmarks/bench_objectives.py                 # digits-sized default (8x8, K=10)
    python benchmarks/bench_objectives.py --image-size 28 --batch-size 128
"""

from __future__ import annotations

import argparse
import copy
import statistics
from typing import Any

import torch
from _timing import seconds_per_call

from calib_pipeline.calibration.losses import build_objective
from calib_pipeline.models import build_model

# (label, registry name, hyperparameters, target ratio vs CE)
ELEMENTWISE = 1.05
BATCH_LEVEL = 1.3
CASES: list[tuple[str, str, dict[str, Any], float | None]] = [
    ("cross_entropy", "cross_entropy", {}, None),
    ("label_smoothing", "label_smoothing", {}, ELEMENTWISE),
    ("entropy_regularized", "entropy_regularized", {}, ELEMENTWISE),
    ("focal", "focal", {}, ELEMENTWISE),
    ("focal detach_pt", "focal", {"detach_pt": True}, ELEMENTWISE),
    ("flsd53", "flsd53", {}, ELEMENTWISE),
    ("inverse_focal", "inverse_focal", {}, ELEMENTWISE),
    ("l1_logit_norm", "l1_logit_norm", {}, ELEMENTWISE),
    ("brier", "brier", {}, ELEMENTWISE),
    ("mse", "mse", {}, ELEMENTWISE),
    ("mixup (incl. mix_batch)", "mixup", {}, ELEMENTWISE),
    ("mmce", "mmce", {}, BATCH_LEVEL),
    ("sb_ece", "sb_ece", {}, BATCH_LEVEL),
    ("soft_avuc", "soft_avuc", {}, BATCH_LEVEL),
    ("avuc", "avuc", {}, None),
    ("avuc_gs", "avuc_gs", {}, None),
    ("focal + soft_avuc", "composite", {"primary": "focal", "secondary": "soft_avuc"}, None),
    ("mse + sb_ece", "composite", {"primary": "mse", "secondary": "sb_ece"}, None),
    ("nll + l2 (composite)", "composite", {"l2": 5e-4}, None),
    ("dual_focal", "dual_focal", {}, None),
    ("mbls", "mbls", {}, None),
    ("logit_norm", "logit_norm", {}, None),
    ("mdca (nll + mdca)", "mdca", {}, None),
    (
        "label_smoothing + mdca",
        "composite",
        {"primary": "label_smoothing", "secondary": "mdca"},
        None,
    ),
    # validation-adaptive (issue 31): the step with the initial state (no val update timed)
    ("adafocal", "adafocal", {}, None),
    ("cals", "cals", {}, None),
]


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=8)
    parser.add_argument("--in-channels", type=int, default=1)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="training steps per timed block")
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds (median)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    return parser.parse_args()


def _make_step(objective, model, optimizer, inputs, labels, generator):
    """One training step exactly as the engine performs it."""

    def step() -> None:
        x, targets = inputs, labels
        if hasattr(objective, "mix_batch"):
            x, targets = objective.mix_batch(inputs, labels, generator)
        loss = objective(model(x), targets, model=model)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def _make_loss_only(objective, logits, labels, model, generator):
    """The objective alone: loss on fixed logits and its backward to the logits."""

    def step() -> None:
        targets = labels
        if hasattr(objective, "mix_batch"):
            _, targets = objective.mix_batch(logits.detach(), labels, generator)
        leaf = logits.detach().requires_grad_(True)
        objective(leaf, targets, model=model).backward()

    return step


def _paired_ratios(
    steps: dict[str, Any], anchor: str, block: int, repeats: int, device: torch.device
) -> dict[str, tuple[float, float]]:
    """Median seconds per step and median of the per-round ratio to ``anchor``.

    Each objective's block is timed right after an anchor block (A B A C A D ...), so
    load from other processes, which drifts over seconds, cancels in the ratio.
    """
    times: dict[str, list[float]] = {label: [] for label in steps}
    ratios: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(repeats):
        for label, step in steps.items():
            reference = seconds_per_call(steps[anchor], block, device)
            elapsed = seconds_per_call(step, block, device)
            times[label].append(elapsed)
            ratios[label].append(elapsed / reference)
    return {
        label: (statistics.median(times[label]), statistics.median(ratios[label]))
        for label in steps
    }


def main() -> None:
    args = _parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_model(
        "small_cnn",
        in_channels=args.in_channels,
        num_classes=args.num_classes,
        image_size=args.image_size,
    ).to(device)
    inputs = torch.randn(
        args.batch_size, args.in_channels, args.image_size, args.image_size, device=device
    )
    labels = torch.randint(0, args.num_classes, (args.batch_size,), device=device)
    with torch.no_grad():
        logits = model(inputs)
    train_steps, loss_steps = {}, {}
    for label, name, params, _ in CASES:
        copy_ = copy.deepcopy(model).train()
        optimizer = torch.optim.SGD(copy_.parameters(), lr=0.01, momentum=0.9)
        objective = build_objective(name, **params)
        train_steps[label] = _make_step(
            objective, copy_, optimizer, inputs, labels, torch.Generator().manual_seed(0)
        )
        loss_steps[label] = _make_loss_only(
            objective, logits, labels, copy_, torch.Generator().manual_seed(0)
        )
    for step in [*train_steps.values(), *loss_steps.values()]:  # warm-up
        seconds_per_call(step, 3, device)
    anchor = CASES[0][0]
    train = _paired_ratios(train_steps, anchor, args.steps, args.repeats, device)
    alone = _paired_ratios(loss_steps, anchor, 10 * args.steps, args.repeats, device)

    print(
        f"device={device} threads={args.threads} batch={args.batch_size} "
        f"input={args.in_channels}x{args.image_size}x{args.image_size} K={args.num_classes}; "
        f"medians of {args.repeats} paired rounds of {args.steps} steps"
    )
    print(
        f"{'objective':<24} {'ms/step':>8} {'x CE':>6} {'target':>7} {'ok':>3}"
        f"  {'loss+bwd us':>11} {'x CE':>6} {'derived x CE':>12}"
    )
    step_ce, loss_ce = train[anchor][0], alone[anchor][0]
    for label, _, _, target in CASES:
        seconds, ratio = train[label]
        verdict = "" if target is None else ("yes" if ratio <= target else "NO")
        target_text = "" if target is None else f"<={target:.2f}"
        loss_seconds, loss_ratio = alone[label]
        derived = 1.0 + (loss_seconds - loss_ce) / step_ce
        print(
            f"{label:<24} {1e3 * seconds:>8.3f} {ratio:>6.3f} {target_text:>7} {verdict:>3}"
            f"  {1e6 * loss_seconds:>11.1f} {loss_ratio:>6.2f} {derived:>12.3f}"
        )
    print(
        "x CE: median paired ratio of whole training steps (its noise floor is the "
        "cross_entropy row, CE timed against itself);\nderived x CE: 1 + (objective alone - "
        "CE alone) / CE step, the step ratio implied by the objective's own cost."
    )


if __name__ == "__main__":
    main()

"""Training throughput of the engine's speed modes against a bare loop and the papers' loop.

For each model on CIFAR-shaped uint8 data (3 x 32 x 32, 10 classes), batch 128, crop + flip,
cross-entropy, SGD (momentum 0.9, weight decay 5e-4), all in one run on one device:

  bare         the floor: a device-resident loop with the engine's batched augmentation,
               the same fused SGD, and nothing else (no bookkeeping, no statistics)
  paper        the seed papers' code style: a DataLoader over host images with per-sample
               crop/flip in worker processes, pinned memory, ``loss.item()`` every step
  engine fp32  ``train_model`` as a run uses it (track_test false, a 1,000-image val split
               evaluated every epoch)
  engine bf16+cl       precision bf16, channels_last
  engine bf16+cl+graph the same with compile (CUDA graphs on a GPU)

Images/s are training images per second of wall time of an epoch (the engine's per-epoch
val evaluation included), median over the timed epochs after a warm-up epoch (which also
pays the compilation). On CUDA it also counts the host synchronisations in one engine
training epoch (``torch.cuda.set_sync_debug_mode``). ``--smoke`` runs the same comparison on
the CPU at a tiny size (small models, 16 x 16 images, compile with the ``aot_eager``
backend) so CI can check the script; its numbers mean nothing for a GPU.

    PYTHONPATH=src python benchmarks/bench_gpu.py            # on a GPU machine
    PYTHONPATH=src python benchmarks/bench_gpu.py --smoke --epochs 2   # CPU

Run times: benchmarks/README.md; measured tables: docs/performance.md.
``--models`` adds the papers' other architectures
(resnet50, resnet110, wrn_26_10, densenet121, vgg16_bn, resnet18@64), ``--loops`` picks
rows, ``--learner fl_gamma_sece`` times a meta-learner's engine loop, ``--host-overhead``
times only what the host spends per step (bare loop vs engine on ResNet-18 at width 2),
``--profile`` compares the kernels per step of the bare loop and the engine's training loop.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import math
import os
import statistics
import time
import traceback
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from calib_pipeline.calibration.losses import OBJECTIVES, build_objective
from calib_pipeline.calibration.methods import MethodSpec, ObjectiveLearner, build_method
from calib_pipeline.models import build_model
from calib_pipeline.models.resnet import CifarResNet
from calib_pipeline.training import Normalizer, Split, TrainConfig, accelerate, engine, train_model
from calib_pipeline.training.data import CROP_PADDING, apply_augmentation, draw_augmentation

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
BATCH = 128
ANCHOR_RESNET18 = 13_600  # train_model, ResNet-18, b128, H200, before this engine (issue 13)


@dataclass(frozen=True)
class Case:
    model: str
    params: dict
    images: int  # training images per epoch
    size: int  # image side
    val: int = 1_000  # val images the engine evaluates every epoch
    name: str = ""  # the label, when not the model's name
    batch: int = BATCH
    widths: tuple[int, ...] = ()  # a CIFAR ResNet-18 with these stage widths (--host-overhead)

    @property
    def label(self) -> str:
        return self.name or self.model


# Multiples of the batch: one graph per model (a last short batch would add one compilation).
GPU_CASES = [Case("resnet18", {}, 25_600, 32), Case("wrn_28_10", {}, 6_400, 32)]
# The papers' other architectures (``--models``), for docs/performance.md's cost table;
# resnet18@64 is Tiny-ImageNet's image size.
EXTRA_CASES = [
    Case("resnet50", {}, 6_400, 32),
    Case("resnet110", {}, 6_400, 32),
    Case("wrn_26_10", {}, 6_400, 32),
    Case("densenet121", {}, 6_400, 32),
    Case("vgg16_bn", {}, 12_800, 32),
    Case("resnet18", {}, 12_800, 64, name="resnet18@64"),
]
SMOKE_CASES = [Case("small_cnn", {}, 256, 16, val=64), Case("resnet20", {}, 128, 16, val=64)]
# ResNet-18's layers at width 2 on 8 x 8 images, batch 4: the same operations per step as
# ResNet-18 with almost no arithmetic, so a step's time is the host's dispatch (and, on a GPU,
# launch) cost and the engine's per-step overhead over the bare loop shows (--host-overhead).
HOST_CASE = Case(
    "resnet18", {}, 800, 8, val=16, name="resnet18 at width 2", batch=4, widths=(2, 2, 2, 2)
)
MODES = {  # label -> TrainConfig speed options
    "engine fp32": {},
    "engine bf16+cl": {"precision": "bf16", "channels_last": True},
    "engine bf16+cl+graph": {"precision": "bf16", "channels_last": True, "compile": True},
}


def _data(case: Case, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(
        0, 256, (case.images, 3, case.size, case.size), generator=generator, dtype=torch.uint8
    )
    return images, torch.randint(0, 10, (case.images,), generator=generator)


def _model(case: Case, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    if case.widths:
        return CifarResNet(3, 10, [2, 2, 2, 2], list(case.widths)).to(device)
    return build_model(
        case.model, in_channels=3, num_classes=10, image_size=case.size, **case.params
    ).to(device)


def _sgd(model: torch.nn.Module, device: torch.device) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4, fused=device.type == "cuda"
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_epochs(
    case: Case, device: torch.device, epochs: int, last_epoch_in=contextlib.nullcontext
) -> list[float]:
    """Seconds per epoch of the floor loop; the last epoch runs inside ``last_epoch_in()``
    (``--profile`` passes the profiler)."""
    images, labels = (t.to(device) for t in _data(case, device))
    model, normalizer = _model(case, device), Normalizer(MEAN, STD, device)
    optimizer = _sgd(model, device)
    generator = torch.Generator(device=device).manual_seed(0)
    times = []
    for epoch in range(1, epochs + 1):
        _sync(device)
        started = time.perf_counter()
        with last_epoch_in() if epoch == epochs else contextlib.nullcontext():
            order = torch.randperm(len(labels), generator=generator, device=device)
            for start in range(0, len(order), case.batch):
                index = order[start : start + case.batch]
                draws = draw_augmentation(len(index), "crop_flip", generator)
                x = normalizer(apply_augmentation(images[index], draws))
                loss = F.cross_entropy(model(x), labels[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            _sync(device)
        times.append(time.perf_counter() - started)
    return times


class _HostImages(Dataset):
    """Per-sample crop + flip on the host, as torchvision transforms do in the papers' code."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image = self.images[i].float().div_(255)
        image = F.pad(image, (CROP_PADDING,) * 4)
        dy, dx = torch.randint(0, 2 * CROP_PADDING + 1, (2,)).tolist()
        side = self.images.shape[-1]
        image = image[:, dy : dy + side, dx : dx + side]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
        return (image - mean) / std, int(self.labels[i])


def paper_epochs(case: Case, device: torch.device, epochs: int, workers: int) -> list[float]:
    """Seconds per epoch of the papers' loop style."""
    images, labels = _data(case, device)
    loader = DataLoader(
        _HostImages(images, labels),
        batch_size=case.batch,
        shuffle=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
    )
    model = _model(case, device)
    optimizer = _sgd(model, device)
    times = []
    for _ in range(epochs):
        started = time.perf_counter()
        total = 0.0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        _sync(device)
        times.append(time.perf_counter() - started)
    return times


def engine_epochs(
    case: Case, device: torch.device, epochs: int, options: dict, learner: str = "cross_entropy"
) -> list[float]:
    """Seconds per epoch of ``train_model`` (from its history), val evaluation included.

    ``learner`` is an objective's or a meta-learner's registry name; a meta-learner gets a
    meta-val split of ``case.val`` images, as the ``meta`` split would give it."""
    images, labels = _data(case, device)
    held_out = Case(case.model, case.params, case.val, case.size)  # same model, val-sized
    val_images, val_labels = _data(held_out, device)
    config = TrainConfig(
        epochs=epochs,
        batch_size=case.batch,
        lr=0.01,
        augment="crop_flip",
        track_test=False,
        device=device.type,
        eval_batch_size=1_000,
        **options,
    )
    model = _model(case, device)
    meta = learner not in OBJECTIVES
    spec = (
        MethodSpec(key=learner, meta_learner=learner)
        if meta
        else MethodSpec(key=learner, objective=learner)
    )
    result = train_model(
        model,
        build_method(spec, num_classes=10, feature_dim=model.feature_dim),
        Split(images, labels),
        Split(val_images, val_labels),
        config,
        normalization=(MEAN, STD),
        seed=0,
        description=case.label,
        meta_val=Split(val_images, val_labels) if meta else None,
    )
    return [row["seconds"] for row in result.history]


def _ce_run(case: Case, device: torch.device, epochs: int, description: str) -> engine._Run:
    """An engine run of CE set up as ``engine_epochs`` sets it up, to drive epoch by epoch."""
    images, labels = _data(case, device)
    val_images, val_labels = _data(Case(case.model, case.params, case.val, case.size), device)
    config = TrainConfig(
        epochs=epochs,
        batch_size=case.batch,
        lr=0.01,
        augment="crop_flip",
        track_test=False,
        device=device.type,
        eval_batch_size=1_000,
    )
    return engine._setup(
        _model(case, device),
        ObjectiveLearner(build_objective("cross_entropy")),
        config,
        {
            "train": Split(images, labels),
            "val": Split(val_images, val_labels),
            "test": None,
            "meta_val": None,
        },
        normalization=(MEAN, STD),
        seed=0,
        record_epoch_logits=False,
        description=description,
    )


def epoch_phases(case: Case, device: torch.device, epochs: int) -> dict[str, float]:
    """Median seconds of each phase of an engine epoch (fp32, CE): the training loop, the
    scheduler step, the evaluation and the weight selection, each ended by a device sync --
    to find where an epoch loses against the bare loop."""
    run = _ce_run(case, device, epochs + 1, "phases")
    phases: dict[str, list[float]] = {
        "train loop": [],
        "scheduler": [],
        "evaluate": [],
        "select": [],
    }
    for epoch in range(1, epochs + 2):  # the first is warm-up
        _sync(device)
        marks = [time.perf_counter()]
        trained = engine._train_epoch(run, epoch)
        _sync(device)
        marks.append(time.perf_counter())
        run.scheduler.step()
        marks.append(time.perf_counter())
        engine._evaluate_epoch(run, epoch, trained)
        _sync(device)
        marks.append(time.perf_counter())
        run.selected = engine._select(run.selected, -epoch, epoch, run.model)  # select: last
        _sync(device)
        marks.append(time.perf_counter())
        if epoch > 1:
            for (_name, values), begin, end in zip(phases.items(), marks, marks[1:]):
                values.append(end - begin)
    return {name: statistics.median(values) for name, values in phases.items()}


def _kernels(profile: torch.profiler.profile, device: torch.device) -> collections.Counter:
    """Microseconds per kernel name in ``profile`` (on the CPU: per top-level operation)."""
    kind = (
        torch.autograd.DeviceType.CUDA if device.type == "cuda" else torch.autograd.DeviceType.CPU
    )
    tally: collections.Counter = collections.Counter()
    for event in profile.events():
        if event.device_type == kind and (device.type == "cuda" or event.cpu_parent is None):
            tally[event.name] += event.time_range.elapsed_us()
            tally[("count", event.name)] += 1
    return tally


def kernel_profile(case: Case, device: torch.device) -> None:
    """The device's work per step in one epoch of the bare loop and of the engine's training
    loop (fp32, CE), under ``torch.profiler`` after a warm-up epoch: kernels launched, their
    summed time and its share of the epoch's wall time (how busy the GPU is; the profiler
    slows the host, so compare the two loops, not these wall times with the table's), and
    the kernels whose time differs most -- whether the engine's gap to the bare loop is
    work on the device or time the device waits for the host."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    steps = math.ceil(case.images / case.batch)
    profiles = {
        "bare": torch.profiler.profile(activities=activities),
        "engine fp32": torch.profiler.profile(activities=activities),
    }
    wall = {"bare": bare_epochs(case, device, 2, lambda: profiles["bare"])[-1]}
    run = _ce_run(case, device, 2, "profile")
    engine._train_epoch(run, 1)  # warm-up
    _sync(device)
    started = time.perf_counter()
    with profiles["engine fp32"]:
        engine._train_epoch(run, 2)
        _sync(device)
    wall["engine fp32"] = time.perf_counter() - started
    tallies = {label: _kernels(profile, device) for label, profile in profiles.items()}
    unit = "kernels" if device.type == "cuda" else "top-level ops"
    print(f"\n{case.label}: device work per step of one profiled epoch ({steps} steps)")
    for label, tally in tallies.items():
        count = sum(v for k, v in tally.items() if isinstance(k, tuple))
        busy = sum(v for k, v in tally.items() if not isinstance(k, tuple)) / 1e6
        print(
            f"  {label:12s} {count / steps:7.1f} {unit}, {busy / steps * 1e3:7.3f} ms of "
            f"{unit}, wall {wall[label] / steps * 1e3:7.3f} ms ({busy / wall[label]:.0%} busy)"
        )
    bare, eng = tallies["bare"], tallies["engine fp32"]
    names = {k for k in [*bare, *eng] if not isinstance(k, tuple)}
    print("  largest differences (engine - bare, per step):")
    for name in sorted(names, key=lambda n: -abs(eng[n] - bare[n]))[:8]:
        print(
            f"    {(eng[name] - bare[name]) / steps:+9.1f} us, calls "
            f"{(eng['count', name] - bare['count', name]) / steps:+6.2f}  {name[:90]}",
            flush=True,
        )


def syncs_per_epoch(case: Case, device: torch.device) -> int:
    """Host synchronisations CUDA reports during one engine training epoch (fp32)."""
    run = _ce_run(case, device, 2, "syncs")
    engine._train_epoch(run, 1)  # warm-up: first-use allocations may sync
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            engine._train_epoch(run, 2)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    for where in sorted({f"{w.filename}:{w.lineno}" for w in syncs}):
        print(f"  a sync at {where}", flush=True)
    return len(syncs)


def _report(case: Case, seconds: dict[str, list[float] | None], timed_from: int) -> None:
    """The table; a loop that failed (None) is listed as such and left out of the ratios."""
    rate = {
        k: None if v is None else case.images / statistics.median(v[timed_from:])
        for k, v in seconds.items()
    }
    nan = float("nan")
    bare, paper = rate.get("bare") or nan, rate.get("paper") or nan
    print(f"\n{case.label}, {case.images} images of {case.size}x{case.size}, batch {case.batch}")
    print(f"{'loop':24s} {'images/s':>10s} {'x bare':>8s} {'x paper':>8s}")
    for label, value in rate.items():
        if value is None:
            print(f"{label:24s} {'failed':>10s}", flush=True)
        else:
            ratios = "".join(
                f"{'--':>8s}" if math.isnan(r) else f"{value / r:8.2f}" for r in (bare, paper)
            )
            print(f"{label:24s} {value:10.0f} {ratios}", flush=True)
    engines = [v for k, v in rate.items() if k.startswith("engine") and v is not None]
    if case.label == "resnet18" and engines:
        print(
            f"fastest engine mode vs the 13.6k images/s before this engine: "
            f"{max(engines) / ANCHOR_RESNET18:.2f}x"
        )


def host_overhead(device: torch.device, epochs: int, rounds: int) -> None:
    """Per-step milliseconds of the bare loop and the engine (fp32) on :data:`HOST_CASE`,
    alternating round by round so that a drifting machine moves both; medians at the end.

    With almost no arithmetic a step costs what the host spends issuing it, so the
    difference is what the engine adds per step (its per-epoch evaluation of 16 images
    included)."""
    case, rows = HOST_CASE, []
    steps = case.images // case.batch
    print(
        f"\nhost overhead: {case.label}, batch {case.batch}, {case.size}x{case.size}, "
        f"{steps} steps per epoch, median of epochs 2..{epochs}, {rounds} rounds",
        flush=True,
    )
    for number in range(1, rounds + 1):
        bare = statistics.median(bare_epochs(case, device, epochs)[1:]) / steps
        eng = statistics.median(engine_epochs(case, device, epochs, {})[1:]) / steps
        rows.append((bare, eng))
        print(
            f"  round {number}: bare {bare * 1e3:.3f} ms/step, engine fp32 {eng * 1e3:.3f} "
            f"ms/step, engine - bare {(eng - bare) * 1e3:+.3f} ms ({eng / bare - 1:+.1%})",
            flush=True,
        )
    bare, eng = (statistics.median(column) for column in zip(*rows))
    paired = statistics.median(b / e for b, e in rows)  # round by round: drift cancels
    print(
        f"median: bare {bare * 1e3:.3f} ms/step, engine fp32 {eng * 1e3:.3f} ms/step; the "
        f"engine runs at {paired:.3f}x the bare loop's steps per second (median of the "
        f"rounds' ratios)",
        flush=True,
    )


def _timed(label: str, loop, *args) -> list[float] | None:
    """Run one loop; on a failure print the traceback and go on with the others (None)."""
    started = time.perf_counter()
    try:
        seconds = loop(*args)
    except Exception:  # noqa: BLE001 -- one broken mode must not cost the rest of a GPU lease
        print(f"  {label} FAILED after {time.perf_counter() - started:.0f} s:", flush=True)
        traceback.print_exc()
        return None
    print(
        f"  {label}: {len(seconds)} epochs in {time.perf_counter() - started:.1f} s, "
        f"seconds per epoch {[round(s, 3) for s in seconds]}",
        flush=True,
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run (CI)")
    parser.add_argument("--models", nargs="*", help="subset of the cases by model name")
    parser.add_argument("--epochs", type=int, default=3, help="first one is warm-up")
    parser.add_argument(
        "--loops", nargs="*", help="subset of the loops by label (bare, paper, 'engine fp32', ...)"
    )
    parser.add_argument(
        "--learner",
        default="cross_entropy",
        help="objective or meta-learner of the engine loops (bare and paper "
        "always train CE; a meta-learner gets a meta-val split)",
    )
    parser.add_argument("--no-syncs", action="store_true", help="skip the host-sync count")
    parser.add_argument(
        "--host-overhead",
        action="store_true",
        help="only time the bare loop and the engine per step on ResNet-18 at "
        "width 2, batch 4 (host cost, almost no arithmetic), alternating",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of the loops, alternating (default 1; 3 with --host-overhead)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile one epoch of the bare loop and the engine fp32: "
        "kernels per step, their time, how busy the device is, what differs",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="also time the phases of an engine fp32 epoch (train loop, "
        "scheduler, evaluation, selection)",
    )
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs: at least 2 (the first is warm-up)")
    rounds = args.rounds if args.rounds is not None else 3 if args.host_overhead else 1
    if rounds < 1:
        parser.error("--rounds: at least 1")
    smoke = args.smoke or not torch.cuda.is_available()
    device = torch.device("cpu" if smoke else "cuda")
    pool = SMOKE_CASES if smoke else GPU_CASES + EXTRA_CASES
    cases = [c for c in pool if c.label in (args.models or [c.label for c in pool[:2]])]
    if args.models and len(cases) != len(args.models):
        parser.error(f"--models: choose from {[c.label for c in pool]}")
    wanted = args.loops or ["bare", "paper", *MODES]
    if unknown := set(wanted) - {"bare", "paper", *MODES}:
        parser.error(f"--loops: unknown {sorted(unknown)}")
    if smoke:
        accelerate.COMPILE_BACKEND = "aot_eager"  # no C++ compiler run on a CI CPU
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    print(
        f"device: {name}; torch {torch.__version__}; {args.epochs} epochs per loop, "
        f"median of epochs 2..{args.epochs}"
        + (f" of {rounds} alternating rounds" if rounds > 1 else "")
        + f"; compile backend {accelerate.COMPILE_BACKEND}; "
        f"engine learner {args.learner}",
        flush=True,
    )
    if args.host_overhead:
        host_overhead(device, args.epochs, rounds)
        return
    workers = 0 if smoke else min(8, os.cpu_count() or 1)
    failed = False
    for case in cases:
        seconds: dict[str, list[float] | None] = {}
        for number in range(1, rounds + 1):  # the loops alternate round by round
            name = case.label if rounds == 1 else f"{case.label} (round {number})"
            timed: dict[str, list[float] | None] = {}
            if "bare" in wanted:
                timed["bare"] = _timed(f"{name}: bare", bare_epochs, case, device, args.epochs)
            if "paper" in wanted:
                timed["paper"] = _timed(
                    f"{name}: paper", paper_epochs, case, device, args.epochs, workers
                )
            for label, options in MODES.items():
                if label in wanted:
                    timed[label] = _timed(
                        f"{name}: {label}",
                        engine_epochs,
                        case,
                        device,
                        args.epochs,
                        options,
                        args.learner,
                    )
            for label, times in timed.items():  # each round's warm-up epoch left out
                kept = seconds.get(label, [])
                seconds[label] = None if times is None or kept is None else [*kept, *times[1:]]
        _report(case, seconds, timed_from=0)
        failed |= any(v is None for v in seconds.values())
        if args.phases:
            try:
                split = epoch_phases(case, device, args.epochs)
            except Exception:  # noqa: BLE001
                failed = True
                traceback.print_exc()
            else:
                total = sum(split.values())
                print(
                    "engine fp32 epoch phases (median s): "
                    + ", ".join(f"{k} {v:.4f} ({v / total:.1%})" for k, v in split.items()),
                    flush=True,
                )
        if args.profile:
            try:
                kernel_profile(case, device)
            except Exception:  # noqa: BLE001
                failed = True
                traceback.print_exc()
        if device.type == "cuda" and not args.no_syncs:
            try:
                print(
                    f"host syncs in one engine training epoch: {syncs_per_epoch(case, device)}",
                    flush=True,
                )
            except Exception:  # noqa: BLE001
                failed = True
                traceback.print_exc()
    if failed:
        raise SystemExit("some loops failed (tracebacks above)")


if __name__ == "__main__":
    main()

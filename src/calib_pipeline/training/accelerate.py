"""Speed options of a training run that leave what it computes unchanged (up to float
rounding): the NHWC memory layout and ``torch.compile`` (CUDA graphs on a GPU).

``training.compile`` compiles the model's forward -- and through AOTAutograd its backward --
for the train steps of a plain objective. On a CUDA device the mode is
``reduce-overhead``: the compiled forward and backward replay as CUDA graphs, so a step
costs a few launches instead of hundreds. The batch shape stays static without dropping or
padding anything: the last, shorter batch of an epoch gets its own graph (one extra
compilation), so every epoch still trains on every sample exactly once, as in eager mode.

A meta-learner differentiates through its own update (``autograd.grad`` with
``create_graph=True``), and torch.compile has no double backward through compiled graphs.
With the last-layer unroll (Bohdal et al.'s truncation, the default) the second-order terms
run through the head and the learner only, so the backbone's ``forward_features`` -- nearly
all of a step's work -- is compiled and the rest runs eagerly. It is compiled without CUDA
graphs: a meta step calls the backbone twice (train batch, then meta-val batch) while the
first call's activations are still needed by the meta backward, and a CUDA-graph replay
would overwrite them. The full unroll differentiates every parameter to second order: it
trains eagerly, and the run says so in a warning. Evaluation always runs the eager model.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable

import torch
from torch import Tensor, nn

from calib_pipeline.calibration.meta import MetaLearner
from calib_pipeline.calibration.methods import ObjectiveLearner

logger = logging.getLogger(__name__)

# The torch.compile backend of ``training.compile``; tests and the CPU smoke benchmark set
# "aot_eager" (the same tracing and AOTAutograd without running a C++ compiler).
COMPILE_BACKEND = "inductor"


def use_channels_last(model: nn.Module, enabled: bool) -> nn.Module:
    """Store ``model``'s 4-d weights NHWC (channels_last) when ``enabled``; conv nets on
    tensor cores run faster that way. The inputs follow via ``Normalizer``."""
    if enabled:
        model.to(memory_format=torch.channels_last)
    return model


def compile_reason(learner: object) -> str | None:
    """Why ``learner``'s step cannot be compiled, or None when it can."""
    if isinstance(learner, ObjectiveLearner):
        if getattr(learner.objective, "uses_features", False):
            return (
                f"objective {getattr(learner.objective, 'name', '?')!r} reads the penultimate "
                "features, and only the model's whole forward is compiled"
            )
        return None
    name = getattr(learner, "name", type(learner).__name__)
    if isinstance(learner, MetaLearner) and learner.unroll == "last_layer":
        return None  # its backbone is compiled (module docstring)
    return (
        f"meta learner {name!r} differentiates through its own update (second-order "
        "gradients through every parameter with unroll 'full'), which torch.compile cannot "
        "capture"
    )


def compiled_forward(
    model: nn.Module, learner: object, device: torch.device, description: str = ""
) -> Callable[[Tensor], Tensor] | None:
    """The compiled forward for ``learner``'s train steps -- the model's forward, or for a
    last-layer meta-learner the backbone's ``forward_features`` -- or None (with a logged
    reason) where the step must run eagerly."""
    label = description or "training"
    reason = compile_reason(learner)
    if reason is not None:
        logger.warning("%s: training.compile: %s; this run trains eagerly", label, reason)
        return None
    if COMPILE_BACKEND == "inductor":
        check_compiler()
    meta = isinstance(learner, MetaLearner)
    graphs = device.type == "cuda" and COMPILE_BACKEND == "inductor" and not meta
    if not graphs:
        why = (
            "a meta step keeps the backbone's activations across two calls"
            if meta
            else "they need a CUDA device and the inductor backend"
        )
        logger.info(
            "%s: training.compile on %s with backend %r: compiled without CUDA graphs (%s)",
            label,
            device,
            COMPILE_BACKEND,
            why,
        )
    target = model.forward_features if meta else model
    return torch.compile(
        target, backend=COMPILE_BACKEND, mode="reduce-overhead" if graphs else None, dynamic=False
    )


def check_compiler() -> None:
    """``training.compile``'s inductor backend builds C++ (and, on a GPU, Triton launchers)
    with the machine's compiler; without one torch fails inside the first training step
    with its own error. Refuse before training instead, naming the way out.

    Raises:
        ValueError: neither ``$CXX`` nor ``g++``, ``clang++`` or ``c++`` is on the PATH.
    """
    candidates = [os.environ.get("CXX", ""), "g++", "clang++", "c++"]
    if not any(name and shutil.which(name) for name in candidates):
        raise ValueError(
            "training.compile needs a C++ compiler for torch.compile's inductor backend, and "
            "none was found ($CXX, g++, clang++, c++): install one (e.g. `apt install g++`) "
            "or set training.compile: false"
        )


def begin_step(uses_graphs: bool) -> None:
    """Tell CUDA-graph trees that a new training step starts (its outputs may be reused)."""
    if uses_graphs:
        torch.compiler.cudagraph_mark_step_begin()

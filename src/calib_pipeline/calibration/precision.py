"""Numeric precision of the training forward passes: ``fp32`` or ``bf16`` autocast.

Every learner opens the same context around its forward passes only (never around a
backward or an optimiser step) and computes its losses in fp32 from fp32-cast logits. bf16
keeps fp32's exponent range, so unlike fp16 it needs no loss scaling: there is no
GradScaler to forget, and second-order meta-gradients need none either. fp16 is not offered
(its gradients underflow without a scaler, which a meta-learner's look-ahead cannot use).

On the CPU bf16 autocast runs everywhere (emulated where the CPU lacks bf16 instructions, so
it is slower there than fp32; it is offered to test a bf16 protocol on a laptop); a CUDA
device without bf16 support fails in ``check_device_precision``.
"""

from __future__ import annotations

import torch

from calib_pipeline.registry import check_choice

PRECISIONS = ("fp32", "bf16")


def check_precision(value: object) -> str:
    """``value`` if it names a precision; otherwise ``ValueError`` listing them."""
    return check_choice("precision", value, PRECISIONS)


def check_device_precision(device: torch.device, precision: str) -> None:
    """Raise if ``device`` cannot run ``precision`` (bf16 on a pre-Ampere GPU)."""
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"precision 'bf16' needs a GPU with bf16 support; {torch.cuda.get_device_name(device)} "
            "has none -- use precision: fp32"
        )


def autocast(device_type: str, precision: str) -> torch.autocast:
    """The autocast context of ``precision`` for forward passes on ``device_type``."""
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "bf16")


def upcast(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in fp32 if autocast made it half precision; unchanged otherwise (a
    float64 model in a finite-difference test stays float64)."""
    return tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor

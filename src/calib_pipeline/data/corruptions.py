"""Generated common corruptions (Hendrycks & Dietterich, ICLR 2019) for any image batch.

``corrupt(images, name, severity, seed=...)`` applies one of the 15 benchmark corruptions
(noise: gaussian, shot, impulse; blur: defocus, glass, motion, zoom; weather: snow, frost,
fog; digital: brightness, contrast, elastic, pixelate, JPEG) or the 4 extra ones (speckle
noise, gaussian blur, spatter, saturate) at severity 1-5 to a float32 (N, C, H, W) batch in
[0, 1], C = 1 or 3.  Sets built this way are *generated* look-alikes of CIFAR-10-C, not the
official files (those are read by :mod:`calib_pipeline.data.shift_sets`).

Parameters.  :data:`SEVERITY_PARAMETERS` holds H&D's published CIFAR-10-C values
(``make_cifar_c.py``) for 32x32 images.  For other sizes the *photometric* parameters
(noise scales, brightness, contrast, saturation, JPEG quality, blend weights, thresholds)
are kept and every *spatial length* in pixels (blur sigmas and radii, glass-shuffle
distance, motion-blur length, elastic displacements and smoothness, spatter smoothness,
frost texture scale) is multiplied by

    s = sqrt(min(H, W) / 32).

Relative quantities (zoom factors, pixelate ratio, fog fractal, which H&D already draw
at the image size) are unchanged.  The square root follows H&D's own choices: their
64x64 Tiny-ImageNet-C lengths are 1.0-3x the 32x32 ones, geometric mean 1.6 (sqrt 2 = 1.41,
linear = 2); and linear scaling would make every blur at 8x8 sub-pixel (sigma <= 0.25 px),
i.e. the identity, on the embedded digits data.

Determinism.  The random draws come from one NumPy ``Generator`` seeded by
``(seed, crc32(name), severity)`` (and a torch ``Generator`` seeded from it), so the output
is a pure function of (images, name, severity, seed); corrupting the same images in
different batch splits draws different noise.

Greyscale.  Colour steps use luma (ITU-R 601): snow's brightening, spatter's water and mud
colours, frost textures.  ``saturate`` has no meaning for grey pixels (in HSV their
saturation is 0 and H&D's code would only tint them red at severities 4-5), so it raises
:class:`CorruptionUnavailable` for C = 1.  ``frost`` needs H&D's six frost photographs,
which cannot be shipped: pass ``frost_dir`` or it raises :class:`CorruptionUnavailable`.

Departures from H&D's code, which needs OpenCV and ImageMagick: see ``docs/shift.md``.
"""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from calib_pipeline.data import _corruption_ops as ops
from calib_pipeline.registry import Registry, check_int

BENCHMARK_CORRUPTIONS: tuple[str, ...] = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
)
EXTRA_CORRUPTIONS: tuple[str, ...] = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)
REFERENCE_SIDE = 32

# H&D's CIFAR-10-C parameters, one entry per severity 1..5 (32x32 images).
SEVERITY_PARAMETERS: dict[str, tuple] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # noise std
    "shot_noise": (500, 250, 100, 75, 50),  # photons per unit intensity
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # salt-and-pepper fraction
    "speckle_noise": (0.06, 0.10, 0.12, 0.16, 0.20),  # multiplicative noise std
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),  # sigma (px)
    # (sigma px, max shuffle distance px, iterations)
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
    # (disk radius px, anti-alias sigma px)
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
    # (ImageMagick radius px, sigma px)
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),
    # zoom factors np.arange(1, stop, 0.01): the float steps give 7, 12, 16, 21, 26 factors
    "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),
    # (fog amount, fractal wibble decay)
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),
    # (image weight, frost weight)
    "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),
    # (layer mean, layer std, layer zoom, threshold, motion radius px, motion sigma px,
    #  image weight)
    "snow": (
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
        (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
    ),
    # (layer mean, layer std, layer sigma px, threshold, intensity | mud sigma px, mud?)
    "spatter": (
        (0.62, 0.1, 0.7, 0.7, 0.5, 0),
        (0.65, 0.1, 0.8, 0.7, 0.5, 0),
        (0.65, 0.3, 1, 0.69, 0.5, 0),
        (0.65, 0.1, 0.7, 0.69, 0.6, 1),
        (0.65, 0.1, 0.5, 0.68, 0.6, 1),
    ),
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # contrast factor
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),  # added to HSV value
    "saturate": ((0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)),  # S * a + b
    "jpeg_compression": (80, 65, 58, 50, 40),  # Pillow JPEG quality
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),  # downsampling ratio
    # (displacement amplitude, displacement smoothness sigma, affine jitter), all x 32 px
    "elastic_transform": (
        (0 * 32, 0 * 32, 0.08 * 32),
        (0.05 * 32, 0.2 * 32, 0.07 * 32),
        (0.08 * 32, 0.06 * 32, 0.06 * 32),
        (0.1 * 32, 0.04 * 32, 0.05 * 32),
        (0.1 * 32, 0.03 * 32, 0.03 * 32),
    ),
}

# H&D's frost photographs (the frost/ folder of their imagenet_c package in
# hendrycks/robustness, also bundled by the imagecorruptions package); their code draws one
# of the first five (np.random.randint(5)), so frost6.jpg is never used.
FROST_FILES: tuple[str, ...] = (
    "frost1.png",
    "frost2.png",
    "frost3.png",
    "frost4.jpg",
    "frost5.jpg",
)
FROST_RESIZE = 0.2  # H&D shrink the photographs by 0.2 before cropping 32x32 patches


class CorruptionUnavailable(ValueError):
    """A corruption that cannot run here (missing frost textures, saturate on greyscale)."""


@dataclass(frozen=True)
class _Context:
    rng: np.random.Generator
    generator: torch.Generator
    scale: float
    frost_dir: Path | None


CorruptionFn = Callable[[torch.Tensor, object, _Context], torch.Tensor]
CORRUPTIONS: Registry[torch.Tensor] = Registry("corruption")


def corruption_names(include_extra: bool = True) -> list[str]:
    """The 15 benchmark corruptions in H&D's order, then (optionally) the 4 extra ones."""
    return list(BENCHMARK_CORRUPTIONS + (EXTRA_CORRUPTIONS if include_extra else ()))


def spatial_scale(height: int, width: int) -> float:
    """Factor ``sqrt(min(H, W) / 32)`` applied to every spatial length parameter."""
    return math.sqrt(min(height, width) / REFERENCE_SIDE)


def check_severity(severity: Any) -> int:
    """``severity`` if it is an integer in 1..5 (``SEVERITIES``); else ``ValueError``."""
    return check_int("severity", severity, low=SEVERITIES[0], high=SEVERITIES[-1])


def check_corruption(
    name: str, severity: int, *, channels: int = 3, frost_dir: str | Path | None = None
) -> None:
    """Validate a (corruption, severity) request before any image is touched.

    Raises:
        ValueError: unknown name or severity outside 1..5 (the message gives the valid ones).
        CorruptionUnavailable: ``frost`` without usable ``frost_dir``; ``saturate`` with
            ``channels == 1``.
    """
    CORRUPTIONS.factory(name)
    check_severity(severity)
    if channels not in (1, 3):
        raise ValueError(f"images must have 1 or 3 channels, got {channels}")
    if name == "saturate" and channels == 1:
        raise CorruptionUnavailable(
            "saturate changes HSV saturation, which is 0 for every grey pixel; it is not "
            "defined for 1-channel images (skip it for greyscale datasets)"
        )
    if name == "frost":
        _frost_paths(frost_dir)


def corrupt(
    images: torch.Tensor,
    name: str,
    severity: int,
    *,
    seed: int,
    frost_dir: str | Path | None = None,
) -> torch.Tensor:
    """Apply corruption ``name`` at ``severity`` to a batch of images.

    Args:
        images: float tensor (N, C, H, W), C in {1, 3}, H, W >= 8, values in [0, 1].
        name: one of :func:`corruption_names`.
        severity: 1 (mildest) .. 5.
        seed: non-negative integer; the result is a pure function of
            (images, name, severity, seed).
        frost_dir: folder holding H&D's frost photographs (``FROST_FILES``); only frost
            uses it.

    Returns:
        A new tensor with the shape, dtype and device of ``images``, values in [0, 1].

    Raises:
        ValueError: bad name, severity, seed or images.
        CorruptionUnavailable: see :func:`check_corruption`.
    """
    _check_images(images)
    check_corruption(name, severity, channels=images.shape[1], frost_dir=frost_dir)
    check_int("seed", seed, low=0)
    if images.shape[0] == 0:
        return images.clone()
    rng = np.random.default_rng([int(seed), zlib.crc32(name.encode()), severity])
    context = _Context(
        rng=rng,
        generator=torch.Generator().manual_seed(int(rng.integers(2**62))),
        scale=spatial_scale(*images.shape[-2:]),
        frost_dir=None if frost_dir is None else Path(frost_dir),
    )
    x = images.detach().to("cpu", torch.float32)
    out = CORRUPTIONS.factory(name)(x, SEVERITY_PARAMETERS[name][severity - 1], context)
    # not in place: a corruption may hand back its input unchanged
    return out.clamp(0.0, 1.0).to(device=images.device, dtype=images.dtype)


def _check_images(images: torch.Tensor) -> None:
    if not isinstance(images, torch.Tensor) or not images.is_floating_point():
        raise ValueError("images must be a floating-point torch tensor (N, C, H, W) in [0, 1]")
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(
            f"images must be (N, C, H, W) with C in {{1, 3}}, got {tuple(images.shape)}"
        )
    if min(images.shape[-2:]) < 8:
        raise ValueError(f"images must be at least 8x8, got {tuple(images.shape[-2:])}")
    if images.numel() and (images.min() < 0 or images.max() > 1 or images.isnan().any()):
        raise ValueError("image values must lie in [0, 1]")


def _register(fn: CorruptionFn) -> CorruptionFn:
    return CORRUPTIONS.register(fn.__name__)(fn)


# ---------------------------------------------------------------- noise


@_register
def gaussian_noise(x: torch.Tensor, std: float, ctx: _Context) -> torch.Tensor:
    """x + N(0, std^2) per pixel and channel."""
    return x + std * torch.randn(x.shape, generator=ctx.generator)


@_register
def shot_noise(x: torch.Tensor, photons: float, ctx: _Context) -> torch.Tensor:
    """Poisson(x * photons) / photons per pixel and channel."""
    return torch.poisson(x * photons, generator=ctx.generator) / photons


@_register
def impulse_noise(x: torch.Tensor, amount: float, ctx: _Context) -> torch.Tensor:
    """Salt and pepper: a fraction ``amount`` of the values becomes 0 or 1 (even odds).

    Values are drawn independently per channel, as scikit-image's ``random_noise(mode='s&p')``
    does on an (H, W, 3) array.
    """
    hit = torch.rand(x.shape, generator=ctx.generator) < amount
    salt = torch.rand(x.shape, generator=ctx.generator) < 0.5
    return torch.where(hit, salt.to(x.dtype), x)


@_register
def speckle_noise(x: torch.Tensor, std: float, ctx: _Context) -> torch.Tensor:
    """x + x * N(0, std^2): noise proportional to the intensity."""
    return x + x * std * torch.randn(x.shape, generator=ctx.generator)


# ---------------------------------------------------------------- blur


@_register
def gaussian_blur(x: torch.Tensor, sigma: float, ctx: _Context) -> torch.Tensor:
    """Gaussian blur of standard deviation ``sigma * s`` pixels."""
    return ops.gaussian_blur(x, sigma * ctx.scale)


@_register
def defocus_blur(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """Convolution with H&D's 32-px anti-aliased disk kernel, resized by s.

    The disk (radius r, anti-alias sigma a) is drawn at the 32-px parameters and the kernel
    is then resized (:func:`rescale_kernel`), because re-drawing a disk of radius ``r * s``
    would turn radii below one pixel into the identity.
    """
    radius, alias_blur = params
    return ops.filter2d(x, ops.rescale_kernel(ops.disk_kernel(radius, alias_blur), ctx.scale))


@_register
def glass_blur(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """Blur, locally shuffle pixels, blur again.

    Each iteration sets every interior pixel p (those at least ``d + 1`` from the top/left
    and ``d`` from the bottom/right edge) to the pixel at ``p + (dy, dx)`` with dy, dx
    uniform on {-d, ..., d-1}.  This is what H&D's loop of in-place "swaps" on an
    (H, W, 3) array does (the swap copies through NumPy views, and for d = 1 every source
    is read before it is overwritten); ``d = max(1, round(s))`` is 1 for images up to 72 px.
    """
    sigma, delta, iterations = params
    sigma *= ctx.scale
    d = max(1, round(delta * ctx.scale))
    n, c, h, w = x.shape
    x = ops.gaussian_blur(x, sigma)
    rows = torch.arange(d + 1, h - d + 1)
    cols = torch.arange(d + 1, w - d + 1)
    if len(rows) and len(cols):
        for _ in range(iterations):
            dy = torch.randint(-d, d, (n, len(rows), len(cols)), generator=ctx.generator)
            dx = torch.randint(-d, d, (n, len(rows), len(cols)), generator=ctx.generator)
            source = (rows.view(1, -1, 1) + dy) * w + (cols.view(1, 1, -1) + dx)
            target = rows.view(-1, 1) * w + cols.view(1, -1)
            flat = x.reshape(n, c, h * w).clone()
            moved = flat.gather(2, source.reshape(n, 1, -1).expand(n, c, -1))
            flat[:, :, target.reshape(-1)] = moved
            x = flat.view(n, c, h, w)
    return ops.gaussian_blur(x, sigma)


@_register
def motion_blur(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """One-sided motion blur (ImageMagick radius ``r * s``, sigma ``sigma * s``) at an angle
    uniform in [-45, 45] degrees per image."""
    radius, sigma = params
    angles = torch.from_numpy(ctx.rng.uniform(-45, 45, x.shape[0]))
    return ops.motion_blur(x, radius * ctx.scale, sigma * ctx.scale, angles)


@_register
def zoom_blur(x: torch.Tensor, stop: float, ctx: _Context) -> torch.Tensor:
    """Mean of the image and its centre zooms by each factor in ``np.arange(1, stop, 0.01)``."""
    factors = np.arange(1, stop, 0.01)
    total = x.clone()
    for factor in factors:
        total += ops.centre_zoom(x, float(factor))
    return total / (len(factors) + 1)


# ---------------------------------------------------------------- weather


@_register
def fog(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """Add ``amount`` x a plasma fractal, then rescale by max / (max + amount) per image.

    The fractal is drawn at the next power of two >= the image side and cropped, as H&D do
    for ImageNet (256 -> 224).
    """
    amount, decay = params
    n, _, h, w = x.shape
    size = 1 << (max(h, w) - 1).bit_length()
    fractal = ops.plasma_fractal(n, size, decay, ctx.rng)[:, :h, :w]
    peak = x.amax(dim=(1, 2, 3), keepdim=True)
    x = x + amount * torch.from_numpy(fractal).float()[:, None]
    return x * peak / (peak + amount)


@_register
def frost(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """Blend with a random crop of a frost photograph: ``a * x + b * frost``.

    The photographs are shrunk by ``0.2 * s`` (H&D: 0.2 at 32 px, 0.3 at 64 px) and one of
    the five is chosen per image, with a uniformly random crop position.
    """
    image_weight, frost_weight = params
    n, c, h, w = x.shape
    textures = _frost_textures(_frost_paths(ctx.frost_dir), FROST_RESIZE * ctx.scale, c)
    choice = ctx.rng.integers(len(textures), size=n)
    layer = torch.empty_like(x)
    for index, texture in enumerate(textures):  # loop over the five photographs
        picked = np.flatnonzero(choice == index)
        if not len(picked):
            continue
        th, tw = texture.shape[-2:]
        if th < h or tw < w:
            raise ValueError(f"frost texture {th}x{tw} is smaller than the images ({h}x{w})")
        top = torch.from_numpy(ctx.rng.integers(0, th - h + 1, size=len(picked)))
        left = torch.from_numpy(ctx.rng.integers(0, tw - w + 1, size=len(picked)))
        rows = (top[:, None] + torch.arange(h))[:, :, None]
        cols = (left[:, None] + torch.arange(w))[:, None, :]
        layer[torch.from_numpy(picked)] = texture[:, rows, cols].permute(1, 0, 2, 3)
    return image_weight * x + frost_weight * layer


def _frost_paths(frost_dir: str | Path | None) -> tuple[Path, ...]:
    hint = (
        "frost needs Hendrycks & Dietterich's frost photographs, which this project cannot "
        f"ship: put {', '.join(FROST_FILES)} (the frost/ folder of H&D's imagenet_c package, "
        "hendrycks/robustness) in a folder and pass it as frost_dir (see docs/shift.md)"
    )
    if frost_dir is None:
        raise CorruptionUnavailable(f"{hint}; no frost_dir was given")
    paths = tuple(Path(frost_dir) / f for f in FROST_FILES)
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise CorruptionUnavailable(f"{hint}; missing: {', '.join(missing)}")
    return paths


@lru_cache(maxsize=8)
def _frost_textures(
    paths: tuple[Path, ...], factor: float, channels: int
) -> tuple[torch.Tensor, ...]:
    textures = []
    for path in paths:
        with Image.open(path) as photo:
            photo = photo.convert("RGB" if channels == 3 else "L")
            size = (max(1, round(photo.width * factor)), max(1, round(photo.height * factor)))
            array = np.asarray(photo.resize(size, Image.Resampling.BILINEAR), dtype=np.float32)
        texture = torch.from_numpy(array / 255.0)
        textures.append(texture.permute(2, 0, 1) if channels == 3 else texture[None])
    return tuple(textures)


@_register
def snow(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """Whiten the image a little and add motion-blurred snow flakes (and their 180° turn).

    Flakes: N(mean, std) per pixel, zoomed about the centre, zeroed below ``threshold``,
    quantised to 8 bits, motion-blurred (radius, sigma x s) at an angle uniform in
    [-135, -45] degrees.  Image: ``w * x + (1 - w) * max(x, 1.5 * luma(x) + 0.5)``.
    """
    mean, std, zoom, threshold, radius, sigma, weight = params
    n, _, h, w = x.shape
    flakes = mean + std * torch.randn((n, 1, h, w), generator=ctx.generator)
    if zoom != 1:
        flakes = ops.centre_zoom(flakes, zoom)
    flakes = torch.where(flakes < threshold, 0.0, flakes)
    flakes = torch.floor(flakes.clamp(0, 1) * 255) / 255
    angles = torch.from_numpy(ctx.rng.uniform(-135, -45, n))
    flakes = ops.motion_blur(flakes, radius * ctx.scale, sigma * ctx.scale, angles)
    x = weight * x + (1 - weight) * torch.maximum(x, ops.to_grey(x) * 1.5 + 0.5)
    return x + flakes + torch.rot90(flakes, 2, dims=(2, 3))


@_register
def spatter(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """Water drops (severities 1-3) or mud splashes (4-5) from a thresholded smooth noise layer.

    Layer: N(mean, std) per pixel, Gaussian-smoothed (sigma x s, spread kept as at 32 px,
    see :func:`smooth_noise`), zeroed below ``threshold``.
    Water: the layer's Canny edges -> distance to them (capped at 20 x s) -> 3x3 box ->
    histogram equalisation -> emboss -> 3x3 box gives a relief ``dist``; the drops add
    ``intensity * norm(layer * dist) * pale turquoise (175, 238, 238)``.  Mud: the
    above-threshold mask smoothed (sigma x s) and cut below 0.8 blends in mud brown
    (63, 42, 20).
    """
    mean, std, sigma, threshold, strength, is_mud = params
    n, c, h, w = x.shape
    noise = std * ctx.rng.standard_normal((n, h, w))
    layer = mean + ops.smooth_noise(noise, sigma, ctx.scale, mode="nearest", truncate=4.0)
    layer[layer < threshold] = 0
    if is_mud:
        mask = (layer > threshold).astype(np.float64)
        mud = ops.smooth_fields(mask, strength * ctx.scale, mode="nearest", truncate=4.0)
        mud = torch.from_numpy(np.where(mud < 0.8, 0.0, mud)).float()[:, None]
        return x * (1 - mud) + ops.colour((63 / 255, 42 / 255, 20 / 255), c) * mud
    liquid = torch.from_numpy(np.clip(np.floor(layer * 255), 0, 255)).float()
    box = torch.full((3, 3), 1 / 9)
    relief = ops.distance_to_edges(ops.canny_edges(liquid, 50, 150), cap=20 * ctx.scale)
    relief = torch.floor(ops.filter2d(relief[:, None], box))[:, 0]
    relief = ops.equalize_histogram(relief)
    emboss = torch.tensor([[-2.0, -1.0, 0.0], [-1.0, 1.0, 1.0], [0.0, 1.0, 2.0]])
    relief = torch.round(ops.filter2d(relief[:, None], emboss)).clamp_(0, 255)
    relief = ops.filter2d(relief, box)
    drops = liquid[:, None] * relief
    peak = drops.amax(dim=(2, 3), keepdim=True)
    drops = torch.where(peak > 0, drops / peak.clamp_min(1e-12), 0.0) * strength
    return x + drops * ops.colour((175 / 255, 238 / 255, 238 / 255), c)


# ---------------------------------------------------------------- digital


def _value_saturation(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """HSV value V = max over channels and saturation S = (V - min) / V (0 where V = 0)."""
    value = x.amax(dim=1, keepdim=True)
    low = x.amin(dim=1, keepdim=True)
    saturation = torch.where(value > 0, (value - low) / value.clamp_min(1e-12), 0.0)
    return value, saturation


@_register
def brightness(x: torch.Tensor, shift: float, ctx: _Context) -> torch.Tensor:
    """HSV value V -> clip(V + shift, 0, 1) with hue and saturation kept.

    With H and S fixed every channel is proportional to V, so the HSV round trip is
    ``x * V'/V`` (and ``V'`` for black pixels, whose S and H are 0).  For C = 1, V = x.
    """
    value, _ = _value_saturation(x)
    target = (value + shift).clamp(0, 1)
    return torch.where(value > 0, x * target / value.clamp_min(1e-12), target)


@_register
def saturate(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """HSV saturation S -> clip(a * S + b, 0, 1) with hue and value kept (colour only).

    Each channel is ``V - (V - x) * S'/S``; grey pixels (S = 0) have hue 0 (red) in
    scikit-image's convention and become ``(V, V(1 - S'), V(1 - S'))``.
    """
    factor, offset = params
    value, saturation = _value_saturation(x)
    target = (saturation * factor + offset).clamp(0, 1)
    coloured = value - (value - x) * target / saturation.clamp_min(1e-12)
    red = torch.tensor([1.0, 0.0, 0.0]).view(1, 3, 1, 1)
    grey = value * (1 - target * (1 - red))
    return torch.where(saturation > 0, coloured, grey)


@_register
def contrast(x: torch.Tensor, factor: float, ctx: _Context) -> torch.Tensor:
    """(x - m) * factor + m with m the per-image, per-channel mean."""
    mean = x.mean(dim=(2, 3), keepdim=True)
    return (x - mean) * factor + mean


@_register
def elastic_transform(x: torch.Tensor, params: tuple, ctx: _Context) -> torch.Tensor:
    """Random affine warp followed by a smooth random displacement field.

    Affine: the points centre + (q, q), centre + (q, -q), centre - (q, q), q = side // 3,
    each move by U(-jitter, jitter).  Field: U(-1, 1) per pixel, Gaussian-smoothed (sigma,
    reflect, truncate 3), times the amplitude; lengths x s, the smoothed field's spread kept
    as at 32 px (:func:`smooth_noise`) so displacements grow with s.  H&D resample twice (OpenCV
    warpAffine, then SciPy map_coordinates); here both maps are composed into one bilinear
    ``grid_sample`` with reflection at the borders.
    """
    amplitude, smoothness, jitter = params
    amplitude, jitter = amplitude * ctx.scale, jitter * ctx.scale
    n, _, h, w = x.shape
    centre = np.array([h // 2, w // 2], dtype=np.float64)
    q = min(h, w) // 3
    source = np.stack([centre + q, [centre[0] + q, centre[1] - q], centre - q])  # (3, 2) row, col
    moved = source[None] + ctx.rng.uniform(-jitter, jitter, size=(n, 3, 2))
    # inverse affine map (moved -> source), so output pixels can look up their source
    design = torch.from_numpy(np.concatenate([moved, np.ones((n, 3, 1))], axis=2))
    inverse = torch.linalg.solve(design, torch.from_numpy(source).expand(n, 3, 2))  # (N, 3, 2)
    fields = ctx.rng.uniform(-1, 1, size=(2, n, h, w))
    dy, dx = (
        torch.from_numpy(
            ops.smooth_noise(f, smoothness, ctx.scale, mode="reflect", truncate=3.0) * amplitude
        )
        for f in fields
    )
    rows, cols = torch.meshgrid(
        torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij"
    )
    points = torch.stack([rows + dy, cols + dx, torch.ones_like(dy)], dim=-1)  # (N, H, W, 3)
    looked_up = points @ inverse[:, None]  # (N, H, W, 2) as (row, col)
    grid = torch.stack(
        [2 * looked_up[..., 1] / (w - 1) - 1, 2 * looked_up[..., 0] / (h - 1) - 1], dim=-1
    )
    return F.grid_sample(
        x, grid.float(), mode="bilinear", padding_mode="reflection", align_corners=True
    )


@_register
def pixelate(x: torch.Tensor, ratio: float, ctx: _Context) -> torch.Tensor:
    """Pillow BOX resize to ``int(side * ratio)`` and back, as H&D do with ``Image.resize``."""
    _, _, h, w = x.shape
    small_h, small_w = int(h * ratio), int(w * ratio)
    rows = ops.pil_box_matrix(small_h, h) @ ops.pil_box_matrix(h, small_h)
    cols = ops.pil_box_matrix(small_w, w) @ ops.pil_box_matrix(w, small_w)
    return ops.separable_resample(x, rows, cols)


@_register
def jpeg_compression(x: torch.Tensor, quality: int, ctx: _Context) -> torch.Tensor:
    """Pillow JPEG encode at ``quality`` and decode (8-bit, Pillow's default 4:2:0 chroma)."""
    pixels = (x * 255).round_().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    mode = "RGB" if x.shape[1] == 3 else "L"
    decoded = np.stack([_jpeg_round_trip(image, mode, quality) for image in pixels])
    out = torch.from_numpy(decoded).float().div_(255)
    return out.view(x.shape[0], x.shape[2], x.shape[3], -1).permute(0, 3, 1, 2).contiguous()


def _jpeg_round_trip(pixels: np.ndarray, mode: str, quality: int) -> np.ndarray:
    buffer = io.BytesIO()
    # fromarray infers RGB from (H, W, 3) and L from (H, W) uint8 arrays
    Image.fromarray(pixels if mode == "RGB" else pixels[..., 0]).save(
        buffer, format="JPEG", quality=quality
    )
    buffer.seek(0)
    with Image.open(buffer) as decoded:
        return np.asarray(decoded)

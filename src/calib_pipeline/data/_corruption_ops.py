"""Batched image operations behind :mod:`calib_pipeline.data.corruptions`.

Every function takes float32 CPU tensors shaped (N, C, H, W) (or (N, H, W) for single-channel
layers such as snow and spatter) and works on the whole batch at once; the only Python
loops run over kernel taps or zoom factors, never over images.

Border conventions follow the OpenCV defaults used by Hendrycks & Dietterich's generator:
``reflect`` in PyTorch is OpenCV's BORDER_REFLECT_101.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage
from torchvision.transforms.v2 import functional as TF

# ITU-R 601 luma weights: OpenCV's RGB2GRAY and Pillow's "L" conversion.
LUMA = (0.299, 0.587, 0.114)


def to_grey(x: torch.Tensor) -> torch.Tensor:
    """Luma of an (N, C, H, W) batch, shape (N, 1, H, W); C = 1 is returned as is."""
    if x.shape[1] == 1:
        return x
    weights = torch.tensor(LUMA, dtype=x.dtype).view(1, 3, 1, 1)
    return (x * weights).sum(dim=1, keepdim=True)


def colour(rgb: tuple[float, float, float], channels: int) -> torch.Tensor:
    """An RGB colour in [0, 1] as a (1, C, 1, 1) tensor; its luma for greyscale images."""
    value = torch.tensor(rgb, dtype=torch.float32)
    if channels == 1:
        value = (value * torch.tensor(LUMA)).sum().view(1)
    return value.view(1, channels, 1, 1)


def gaussian_blur(x: torch.Tensor, sigma: float, truncate: float = 4.0) -> torch.Tensor:
    """Gaussian blur over H and W with standard deviation ``sigma`` pixels.

    The kernel has radius ``ceil(truncate * sigma)`` with scikit-image's default
    ``truncate = 4`` (SciPy rounds ``truncate * sigma`` to the nearest integer instead; the
    extra tap weighs under 1e-5), capped below the image side so reflection padding stays
    defined.
    """
    if sigma <= 0:
        return x
    radius = min(math.ceil(truncate * sigma), min(x.shape[-2:]) - 1)
    size = 2 * radius + 1
    return TF.gaussian_blur(x, kernel_size=[size, size], sigma=[sigma, sigma])


def filter2d(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Correlate every channel with one odd-sized 2-D ``kernel`` (OpenCV ``filter2D``)."""
    kh, kw = kernel.shape
    channels = x.shape[1]
    weight = kernel.to(x.dtype).expand(channels, 1, kh, kw)
    padded = F.pad(x, (kw // 2, kw // 2, kh // 2, kh // 2), mode="reflect")
    return F.conv2d(padded, weight, groups=channels)


def disk_kernel(radius: float, alias_blur: float) -> torch.Tensor:
    """Anti-aliased disk of ``radius`` pixels (defocus blur), summing to one.

    The disk ``x**2 + y**2 <= radius**2`` is normalised and smoothed by a 3x3 Gaussian of
    standard deviation ``alias_blur``.  The support is the disk plus a two-pixel zero
    margin; H&D use a fixed 17x17 support, whose extra zeros change nothing.
    """
    half = math.ceil(radius) + 2
    grid = torch.arange(-half, half + 1, dtype=torch.float64)
    disk = ((grid[:, None] ** 2 + grid[None, :] ** 2) <= radius**2).double()
    disk /= disk.sum()
    taps = torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64)
    g = torch.exp(-(taps**2) / (2 * max(alias_blur, 1e-6) ** 2))
    g /= g.sum()
    smoothed = F.conv2d(disk[None, None], torch.outer(g, g)[None, None], padding=1)[0, 0]
    return smoothed.float()


def rescale_kernel(kernel: torch.Tensor, scale: float) -> torch.Tensor:
    """Resize a square, odd-sized kernel by ``scale`` while keeping its sum.

    Each tap is a unit square of mass ``kernel[u]`` centred at u; scaled by ``scale`` it
    covers ``[scale * (u - 1/2), scale * (u + 1/2)]`` per axis, and its mass goes to the
    output taps in proportion to the overlap.  ``scale == 1`` returns the kernel unchanged,
    and the result varies continuously with ``scale`` (a re-rasterised disk would jump
    whenever the radius crosses a pixel distance).
    """
    if scale == 1:
        return kernel
    half_in = kernel.shape[0] // 2
    half_out = math.ceil(scale * (half_in + 0.5) - 0.5)
    taps_in = torch.arange(-half_in, half_in + 1, dtype=torch.float64)
    taps_out = torch.arange(-half_out, half_out + 1, dtype=torch.float64)
    low = torch.maximum(scale * (taps_in[None] - 0.5), taps_out[:, None] - 0.5)
    high = torch.minimum(scale * (taps_in[None] + 0.5), taps_out[:, None] + 0.5)
    overlap = (high - low).clamp_min(0) / scale  # (out, in): share of each input tap
    return (overlap @ kernel.double() @ overlap.T).float()


def motion_blur(
    x: torch.Tensor, radius: float, sigma: float, angles_deg: torch.Tensor
) -> torch.Tensor:
    """One-sided motion blur as ImageMagick's ``MotionBlurImage`` computes it.

    Output pixel p is ``sum_i w_i x(p + round(i * (cos a, sin a)))`` for taps
    ``i = 0 .. 2*ceil(radius)`` with ``w_i ∝ exp(-i**2 / (2 sigma**2))``; taps whose weight
    is below 1e-4 of the first are dropped.  Pixels beyond the border repeat the edge.
    ``angles_deg`` holds one direction per image, shape (N,).
    """
    n, c, h, w = x.shape
    taps = torch.arange(2 * math.ceil(radius) + 1, dtype=torch.float64)
    weights = torch.exp(-(taps**2) / (2 * sigma**2))
    keep = weights >= 1e-4
    taps, weights = taps[keep], (weights[keep] / weights[keep].sum()).float()
    angles = torch.deg2rad(angles_deg.double())
    dx = torch.round(taps[:, None] * torch.cos(angles)[None]).long()  # (K, N)
    dy = torch.round(taps[:, None] * torch.sin(angles)[None]).long()
    rows = torch.arange(h).view(1, h, 1)
    cols = torch.arange(w).view(1, 1, w)
    flat = x.reshape(n, c, h * w)
    out = torch.zeros_like(flat)
    for k in range(len(taps)):
        r = (rows + dy[k].view(n, 1, 1)).clamp_(0, h - 1)
        q = (cols + dx[k].view(n, 1, 1)).clamp_(0, w - 1)
        index = (r * w + q).reshape(n, 1, h * w).expand(n, c, h * w)
        out += weights[k] * flat.gather(2, index)
    return out.view(n, c, h, w)


def centre_zoom(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Zoom by ``factor`` >= 1 about the image centre, keeping the size (bilinear).

    Output pixel u samples the input at ``centre + (u - centre) / factor``; this is H&D's
    ``clipped_zoom`` (crop the central 1/factor, resize back) without its half-pixel crop
    offsets.
    """
    n, _, h, w = x.shape
    theta = torch.tensor([[1.0 / factor, 0.0, 0.0], [0.0, 1.0 / factor, 0.0]], dtype=x.dtype)
    grid = F.affine_grid(theta.expand(1, 2, 3), [1, 1, h, w], align_corners=False)
    return F.grid_sample(x, grid.expand(n, h, w, 2), mode="bilinear", align_corners=False)


def pil_box_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """Resampling matrix (n_out, n_in) of Pillow's ``Image.BOX`` filter along one axis.

    Pillow averages, with equal weights, the input pixels whose centres fall inside the
    output pixel's footprint ``[(j + 0.5) * scale -/+ max(scale, 1) / 2]`` with
    ``scale = n_in / n_out``.
    """
    scale = n_in / n_out
    filterscale = max(scale, 1.0)
    centres = (np.arange(n_out) + 0.5) * scale
    offsets = (np.arange(n_in)[None, :] + 0.5 - centres[:, None]) / filterscale
    weights = ((offsets > -0.5) & (offsets <= 0.5)).astype(np.float64)
    empty = weights.sum(axis=1) == 0
    # Upsampling by a non-integer ratio can leave a footprint without a centre: take the
    # nearest input pixel, which is what the box filter degenerates to there.
    weights[empty, np.clip(np.floor(centres[empty]).astype(int), 0, n_in - 1)] = 1.0
    return torch.from_numpy(weights / weights.sum(axis=1, keepdims=True)).float()


def separable_resample(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Apply ``rows`` (H', H) and ``cols`` (W', W) resampling matrices: R x C^T per channel."""
    return torch.einsum("ih,nchw,jw->ncij", rows, x, cols)


def plasma_fractal(n: int, size: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` diamond-square height maps of side ``size`` (a power of two), each in [0, 1].

    At each octave the squares' centres get the mean of their four corners and the
    diamonds' centres the mean of their four neighbours (wrapping around), plus uniform
    noise of half-width ``wibble**2``; ``wibble`` starts at 100 and is divided by ``decay``
    per octave, so a larger ``decay`` gives smoother fog (H&D's ``plasma_fractal``).
    """
    field = np.zeros((n, size, size))
    step, wibble = size, 100.0
    while step >= 2:
        half = step // 2
        corners = field[:, ::step, ::step]
        square = corners + np.roll(corners, -1, axis=1)
        square = square + np.roll(square, -1, axis=2)
        field[:, half::step, half::step] = square / 4 + wibble * rng.uniform(
            -wibble, wibble, square.shape
        )
        centres = field[:, half::step, half::step]
        corners = field[:, ::step, ::step]
        across = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=2)
        field[:, ::step, half::step] = across / 4 + wibble * rng.uniform(
            -wibble, wibble, across.shape
        )
        down = centres + np.roll(centres, 1, axis=2) + corners + np.roll(corners, -1, axis=1)
        field[:, half::step, ::step] = down / 4 + wibble * rng.uniform(-wibble, wibble, down.shape)
        step //= 2
        wibble /= decay
    field -= field.min(axis=(1, 2), keepdims=True)
    return field / field.max(axis=(1, 2), keepdims=True)


def smooth_fields(fields: np.ndarray, sigma: float, mode: str, truncate: float) -> np.ndarray:
    """Gaussian-smooth a stack of 2-D fields (N, H, W) in H and W only (SciPy ndimage)."""
    if sigma <= 0:
        return fields
    return ndimage.gaussian_filter(fields, sigma=(0, sigma, sigma), mode=mode, truncate=truncate)


def smoothed_noise_gain(sigma: float, truncate: float) -> float:
    """Standard deviation of white noise of unit variance after ``smooth_fields``.

    For the separable kernel k (SciPy's: radius ``int(truncate * sigma + 0.5)``, weights
    ``exp(-t**2 / (2 sigma**2))`` normalised) the gain is ``sum(k**2)``, borders aside.
    """
    if sigma <= 0:
        return 1.0
    radius = int(truncate * sigma + 0.5)
    taps = np.arange(-radius, radius + 1)
    kernel = np.exp(-(taps**2) / (2 * sigma**2))
    kernel /= kernel.sum()
    return float((kernel**2).sum())


def smooth_noise(
    noise: np.ndarray, sigma: float, scale: float, mode: str, truncate: float
) -> np.ndarray:
    """Smooth zero-mean white noise with ``sigma * scale`` pixels, keeping the 32-px spread.

    A larger smoothing kernel averages more pixels and shrinks the field's standard
    deviation; the result is multiplied back to the deviation it has with ``sigma`` itself,
    so thresholds and amplitudes tuned at 32 px keep their meaning at every size.
    """
    smoothed = smooth_fields(noise, sigma * scale, mode, truncate)
    gain = smoothed_noise_gain(sigma, truncate) / smoothed_noise_gain(sigma * scale, truncate)
    return smoothed * gain


def canny_edges(image: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Canny edges of (N, H, W) 8-bit-valued images, as OpenCV's ``Canny(img, low, high)``.

    3x3 Sobel gradients, L1 magnitude ``|gx| + |gy|``, non-maximum suppression along the
    gradient direction quantised to 0/45/90/135 degrees, and hysteresis: weak pixels
    (magnitude > ``low``) are kept when 8-connected to a strong one (> ``high``).
    """
    sobel = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
    padded = F.pad(image[:, None], (1, 1, 1, 1), mode="reflect")
    gx = F.conv2d(padded, sobel[None, None])[:, 0]
    gy = F.conv2d(padded, sobel.T[None, None])[:, 0]
    magnitude = gx.abs() + gy.abs()
    angle = torch.rad2deg(torch.atan2(gy, gx)) % 180.0
    sector = torch.round(angle / 45.0).long() % 4  # 0: horizontal gradient, 1: 45°, ...
    m = F.pad(magnitude[:, None], (1, 1, 1, 1))[:, 0]
    h, w = image.shape[-2:]

    def shifted(dy: int, dx: int) -> torch.Tensor:
        return m[:, 1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w]

    # neighbours along the gradient for each sector (rows grow downwards)
    pairs = [((0, -1), (0, 1)), ((-1, -1), (1, 1)), ((-1, 0), (1, 0)), ((-1, 1), (1, -1))]
    is_max = torch.zeros_like(magnitude, dtype=torch.bool)
    for index, (before, after) in enumerate(pairs):
        local = (magnitude > shifted(*before)) & (magnitude >= shifted(*after))
        is_max |= (sector == index) & local
    weak = (is_max & (magnitude > low)).numpy()
    strong = (is_max & (magnitude > high)).numpy()
    structure = np.zeros((3, 3, 3), dtype=bool)
    structure[1] = True  # 8-connectivity inside each image, none across the batch
    labels, count = ndimage.label(weak, structure=structure)
    keep = np.zeros(count + 1, dtype=bool)
    keep[np.unique(labels[strong])] = True
    keep[0] = False
    return torch.from_numpy(keep[labels])


def distance_to_edges(edges: torch.Tensor, cap: float) -> torch.Tensor:
    """Euclidean distance (pixels) from each pixel to the nearest edge pixel, capped at ``cap``.

    One SciPy ``distance_transform_edt`` call serves the whole (N, H, W) stack: the batch
    axis gets a spacing of H + W, larger than any in-image distance, so the nearest edge is
    always found in the pixel's own image; images without edges get ``cap`` everywhere.
    """
    stack = edges.numpy()
    _n, h, w = stack.shape
    if not stack.any():
        return torch.full(edges.shape, float(cap))
    distance = ndimage.distance_transform_edt(~stack, sampling=(h + w, 1, 1))
    distance = np.where(stack.any(axis=(1, 2), keepdims=True), distance, cap)
    return torch.from_numpy(np.minimum(distance, cap)).float()


def equalize_histogram(image: torch.Tensor) -> torch.Tensor:
    """Per-image histogram equalisation of 8-bit-valued (N, H, W) images (OpenCV's rule).

    ``lut[v] = round(255 * (cdf[v] - cdf[v_min]) / (H*W - cdf[v_min]))`` with ``v_min`` the
    darkest value present; a constant image is left unchanged.
    """
    n = image.shape[0]
    values = image.reshape(n, -1).long()
    hist = torch.zeros(n, 256).scatter_add_(1, values, torch.ones_like(values, dtype=torch.float32))
    cdf = hist.cumsum(dim=1)
    first = (hist > 0).float().argmax(dim=1, keepdim=True)
    cdf_min = cdf.gather(1, first)
    total = float(values.shape[1])
    spread = (total - cdf_min).clamp_min(1.0)
    lut = torch.round((cdf - cdf_min) * 255.0 / spread).clamp_(0, 255)
    lut = torch.where(total == cdf_min, torch.arange(256.0).expand(n, 256), lut)
    return lut.gather(1, values).view(image.shape)

"""Generated corruptions: contract, determinism, severity ordering, greyscale, failure paths."""

from __future__ import annotations

import functools
import io
import itertools

import numpy as np
import pytest
import skimage.color
import skimage.data
import torch
import torch.nn.functional as F
from PIL import Image
from scipy import ndimage

from calib_pipeline.data import _corruption_ops as ops
from calib_pipeline.data.corruptions import (
    BENCHMARK_CORRUPTIONS,
    CORRUPTIONS,
    EXTRA_CORRUPTIONS,
    FROST_FILES,
    SEVERITY_PARAMETERS,
    CorruptionUnavailable,
    check_corruption,
    corrupt,
    corruption_names,
    spatial_scale,
)

# Corruptions whose output does not depend on the seed.
DETERMINISTIC = {
    "defocus_blur",
    "zoom_blur",
    "brightness",
    "contrast",
    "pixelate",
    "jpeg_compression",
    "gaussian_blur",
    "saturate",
}
NEEDS_ASSET = {"frost"}


@functools.cache
def natural_images(n: int, side: int, grey: bool) -> torch.Tensor:
    """``n`` crops of scikit-image's bundled photographs, resized to ``side`` (antialiased)."""
    photos = [
        skimage.data.astronaut(),
        skimage.data.coffee(),
        skimage.data.chelsea(),
        skimage.data.rocket(),
        skimage.data.immunohistochemistry(),
    ]
    rng = np.random.default_rng(7)
    crops = []
    for i in range(n):
        photo = photos[i % len(photos)]
        size = int(rng.integers(96, min(photo.shape[:2])))
        top = rng.integers(0, photo.shape[0] - size + 1)
        left = rng.integers(0, photo.shape[1] - size + 1)
        crop = torch.from_numpy(photo[top : top + size, left : left + size].copy())
        crop = crop.permute(2, 0, 1)[None].float() / 255
        crops.append(F.interpolate(crop, size=(side, side), mode="bilinear", antialias=True))
    images = torch.cat(crops).clamp(0, 1)
    return ops.to_grey(images) if grey else images


@functools.cache
def digit_images(n: int) -> torch.Tensor:
    from sklearn.datasets import load_digits

    return torch.tensor(load_digits().images[:n] / 16.0, dtype=torch.float32)[:, None]


# (label, images): the embedded default (8x8 digits), MNIST-sized grey, CIFAR-sized colour.
# Small images need more of them for the random corruptions' distances to settle.
BATCHES = {
    "digits8": lambda: digit_images(48),
    "grey28": lambda: natural_images(16, 28, True),
    "rgb32": lambda: natural_images(16, 32, False),
}


CHANNELS = {"digits8": 1, "grey28": 1, "rgb32": 3}
# every (corruption, batch) that runs without an asset; frost and saturate-on-grey are
# covered by their own tests below
CASES = [
    (name, batch)
    for name in corruption_names()
    for batch in sorted(BATCHES)
    if name not in NEEDS_ASSET and not (name == "saturate" and CHANNELS[batch] == 1)
]


def distances(images: torch.Tensor, name: str, seed: int = 0, **kw) -> list[float]:
    """RMS pixel distance between the clean and corrupted batch, per severity 1..5."""
    return [
        float((corrupt(images, name, s, seed=seed, **kw) - images).pow(2).mean().sqrt())
        for s in range(1, 6)
    ]


# ------------------------------------------------------------------ names and parameters


def test_names_follow_hendrycks_order_and_registry():
    assert corruption_names(include_extra=False) == list(BENCHMARK_CORRUPTIONS)
    assert len(BENCHMARK_CORRUPTIONS) == 15 and len(EXTRA_CORRUPTIONS) == 4
    assert corruption_names() == list(BENCHMARK_CORRUPTIONS + EXTRA_CORRUPTIONS)
    assert sorted(CORRUPTIONS.names()) == sorted(corruption_names())
    assert set(SEVERITY_PARAMETERS) == set(corruption_names())
    assert all(len(values) == 5 for values in SEVERITY_PARAMETERS.values())


def test_published_parameters_spot_checks():
    # Hendrycks & Dietterich, make_cifar_c.py
    assert SEVERITY_PARAMETERS["gaussian_noise"] == (0.04, 0.06, 0.08, 0.09, 0.10)
    assert SEVERITY_PARAMETERS["shot_noise"] == (500, 250, 100, 75, 50)
    assert SEVERITY_PARAMETERS["contrast"] == (0.75, 0.5, 0.4, 0.3, 0.15)
    assert SEVERITY_PARAMETERS["jpeg_compression"] == (80, 65, 58, 50, 40)
    assert SEVERITY_PARAMETERS["glass_blur"][3] == (0.25, 1, 2)
    assert SEVERITY_PARAMETERS["snow"][4] == (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)


def test_spatial_scale_rule():
    assert spatial_scale(32, 32) == 1.0
    assert spatial_scale(8, 8) == pytest.approx(0.5)
    assert spatial_scale(64, 48) == pytest.approx((48 / 32) ** 0.5)


# ------------------------------------------------------------------ contract per corruption


@pytest.mark.parametrize("name, batch", CASES)
def test_contract_and_determinism(name, batch):
    images = BATCHES[batch]()[:4]
    original = images.clone()
    first = corrupt(images, name, 3, seed=11)
    assert torch.equal(images, original), "input modified in place"
    assert first.shape == images.shape and first.dtype == torch.float32
    assert first.min() >= 0 and first.max() <= 1 and not first.isnan().any()
    assert not torch.allclose(first, images, atol=1e-3)
    assert torch.equal(first, corrupt(images, name, 3, seed=11))
    other_seed = corrupt(images, name, 3, seed=12)
    assert torch.equal(first, other_seed) == (name in DETERMINISTIC)


@pytest.mark.parametrize("name", sorted(set(corruption_names()) - NEEDS_ASSET))
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_constant_images_stay_finite_and_in_range(name, value):
    images = torch.full((2, 3, 16, 16), value)
    out = corrupt(images, name, 5, seed=0)
    assert torch.isfinite(out).all() and out.min() >= 0 and out.max() <= 1


def test_dtype_and_noncontiguous_input_are_preserved():
    images = natural_images(2, 32, False).double()
    out = corrupt(images, "gaussian_noise", 2, seed=0)
    assert out.dtype == torch.float64
    strided = natural_images(2, 32, False).transpose(2, 3)
    assert corrupt(strided, "motion_blur", 2, seed=0).shape == strided.shape


def test_empty_batch():
    assert corrupt(torch.zeros(0, 3, 32, 32), "fog", 1, seed=0).shape == (0, 3, 32, 32)


# ------------------------------------------------------------------ severity ordering

# Pairs (a, b) of severities with distance(a) < distance(b) that hold for the RMS pixel
# distance; the default is the full chain 1 < 2 < 3 < 4 < 5.  The exceptions follow from
# H&D's parameters (docs/shift.md, "Severity ordering"):
CHAIN = ((1, 2), (2, 3), (3, 4), (4, 5))
ORDER = {
    # severities 3 and 4 share one effective kernel (sigma 2 truncates both radii)
    "motion_blur": ((1, 2), (2, 3), (3, 5), (4, 5)),
    # one shuffle pass at 1-3, two at 4-5; a larger blur smooths the shuffle back
    "glass_blur": ((1, 4), (2, 4), (3, 4), (1, 5), (2, 5), (3, 5)),
    # water drops at 1-3, mud at 4-5
    "spatter": ((1, 2), (2, 3), (4, 5)),
    # saturation x0.3, x0.1 (desaturate), then x1.5, x2 + 0.1, x2.5 + 0.2
    "saturate": ((1, 2), (3, 4), (4, 5)),
    # the affine jitter shrinks with severity while the elastic field grows: see
    # test_elastic_local_deformation_grows_with_severity
    "elastic_transform": (),
    # 2 and 3 differ by ~5 % in expected distance, less than the flake randomness of a batch
    "snow": ((1, 2), (1, 3), (2, 4), (3, 4), (4, 5)),
}
ORDER_AT_8PX = {
    # int(8 * ratio) gives 7, 7, 6, 6, 5 pixels: equal pairs, and 6 px aliases worse than 5
    "pixelate": ((1, 3), (1, 5)),
    # 8x8 flakes: 4 (zoom 2.25) makes larger flakes than 5 (zoom 1.25, longer streaks)
    "snow": ((1, 2), (1, 3), (2, 4), (3, 4), (3, 5)),
}


@pytest.mark.parametrize("name, batch", CASES)
def test_distance_grows_with_severity(name, batch):
    images = BATCHES[batch]()
    d = distances(images, name)
    pairs = (ORDER_AT_8PX if batch == "digits8" else {}).get(name, ORDER.get(name, CHAIN))
    for a, b in pairs:
        assert d[a - 1] < d[b - 1], f"{name}: d({a}) = {d[a - 1]:.4f} !< d({b}) = {d[b - 1]:.4f}"
    assert min(d) > 0


def test_equal_severity_pairs_are_documented_ties():
    # motion blur 3 vs 4 and pixelate at 8 px (1 = 2, 3 = 4) are ties, not reversals
    d = distances(natural_images(8, 32, False), "motion_blur")
    assert d[3] == pytest.approx(d[2], rel=0.05)
    digits = digit_images(16)
    for a, b in ((1, 2), (3, 4)):
        low, high = (corrupt(digits, "pixelate", s, seed=0) for s in (a, b))
        assert torch.equal(low, high)


def test_elastic_local_deformation_grows_with_severity():
    """Warp a coordinate ramp: the part of the displacement no affine map explains grows."""
    side, n = 32, 6
    ramp = torch.linspace(0.25, 0.75, side)
    rows, cols = torch.meshgrid(ramp, ramp, indexing="ij")
    images = torch.stack([rows, cols, torch.full_like(rows, 0.5)])[None].repeat(n, 1, 1, 1)
    inner = slice(6, side - 6)  # keep away from the reflected border
    residuals = []
    for severity in range(1, 6):
        warped = corrupt(images, "elastic_transform", severity, seed=3)
        source = warped[:, :2, inner, inner].reshape(n, 2, -1).transpose(1, 2).double()
        target = images[:, :2, inner, inner].reshape(n, 2, -1).transpose(1, 2).double()
        design = torch.cat([target, torch.ones_like(target[..., :1])], dim=2)
        fit = torch.linalg.lstsq(design, source).solution
        residuals.append(float((design @ fit - source).pow(2).mean().sqrt()))
    assert residuals[0] < 1e-4  # severity 1 is a pure affine warp
    assert all(a < b for a, b in itertools.pairwise(residuals)), residuals


def test_severity_scaled_noise_matches_published_std():
    grey = torch.full((64, 3, 32, 32), 0.5)
    for severity, std in enumerate(SEVERITY_PARAMETERS["gaussian_noise"], start=1):
        noise = corrupt(grey, "gaussian_noise", severity, seed=0) - grey
        assert float(noise.std()) == pytest.approx(std, rel=0.02)


def test_blurs_stay_visible_on_8px_digits():
    # the square-root rule keeps every blur above the identity on the embedded default
    digits = digit_images(16)
    for name in ("defocus_blur", "gaussian_blur", "glass_blur", "motion_blur", "zoom_blur"):
        assert distances(digits, name)[-1] > 0.02, name


# ------------------------------------------------------------------ greyscale and colour


def test_greyscale_brightness_and_contrast_formulas():
    images = digit_images(4)
    bright = corrupt(images, "brightness", 2, seed=0)
    torch.testing.assert_close(bright, (images + 0.1).clamp(0, 1))
    flat = corrupt(images, "contrast", 5, seed=0)
    mean = images.mean(dim=(2, 3), keepdim=True)
    torch.testing.assert_close(flat, ((images - mean) * 0.15 + mean).clamp(0, 1))


def test_brightness_keeps_hue_and_saturation():
    images = natural_images(4, 32, False)
    out = corrupt(images, "brightness", 3, seed=0)
    hsv_in = torch.from_numpy(skimage.color.rgb2hsv(images.permute(0, 2, 3, 1).numpy()))
    hsv_out = torch.from_numpy(skimage.color.rgb2hsv(out.permute(0, 2, 3, 1).numpy()))
    value = (hsv_in[..., 2] + 0.15).clamp(0, 1)
    torch.testing.assert_close(hsv_out[..., 2], value, atol=1e-5, rtol=0)
    coloured = hsv_in[..., 1] > 0.05
    saturation_in, saturation_out = hsv_in[..., 1][coloured], hsv_out[..., 1][coloured]
    torch.testing.assert_close(saturation_out, saturation_in, atol=1e-4, rtol=0)


def test_saturate_matches_hsv_round_trip():
    images = natural_images(4, 32, False)
    out = corrupt(images, "saturate", 4, seed=0)  # S -> clip(2 S + 0.1)
    hsv = skimage.color.rgb2hsv(images.permute(0, 2, 3, 1).numpy())
    hsv[..., 1] = np.clip(hsv[..., 1] * 2 + 0.1, 0, 1)
    expected = torch.from_numpy(skimage.color.hsv2rgb(hsv)).permute(0, 3, 1, 2).float()
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_saturate_is_unavailable_for_greyscale():
    with pytest.raises(CorruptionUnavailable, match="1-channel"):
        corrupt(digit_images(2), "saturate", 1, seed=0)
    with pytest.raises(ValueError):  # CorruptionUnavailable is a ValueError
        check_corruption("saturate", 1, channels=1)
    check_corruption("saturate", 1, channels=3)


def test_pixelate_matches_pillow_box_round_trip():
    images = natural_images(2, 32, False)
    out = corrupt(images, "pixelate", 4, seed=0)  # 32 -> int(32 * 0.75) = 24 -> 32
    pixels = (images[0].permute(1, 2, 0).numpy() * 255).astype(np.float32)
    channels = []
    for c in range(3):
        image = Image.fromarray(pixels[..., c])  # mode F keeps Pillow from rounding
        image = image.resize((24, 24), Image.Resampling.BOX).resize((32, 32), Image.Resampling.BOX)
        channels.append(np.asarray(image) / 255)
    expected = torch.from_numpy(np.stack(channels)).float()
    torch.testing.assert_close(out[0], expected, atol=1e-5, rtol=0)


def test_jpeg_is_pillows_codec():
    images = natural_images(2, 32, False)
    out = corrupt(images, "jpeg_compression", 5, seed=0)
    pixels = (images[1] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=40)
    expected = torch.from_numpy(np.array(Image.open(buffer))).permute(2, 0, 1).float() / 255
    torch.testing.assert_close(out[1], expected)


# ------------------------------------------------------------------ frost


def write_frost_textures(folder) -> None:
    rng = np.random.default_rng(0)
    for name in FROST_FILES:
        texture = ndimage.gaussian_filter(rng.random((300, 400, 3)), sigma=(4, 4, 0))
        pixels = (255 * (texture - texture.min()) / np.ptp(texture)).astype(np.uint8)
        Image.fromarray(pixels).save(folder / name)


def test_frost_without_textures_is_unavailable(tmp_path):
    images = natural_images(2, 32, False)
    with pytest.raises(CorruptionUnavailable, match="frost_dir"):
        corrupt(images, "frost", 1, seed=0)
    with pytest.raises(CorruptionUnavailable, match=r"frost3\.png"):
        corrupt(images, "frost", 1, seed=0, frost_dir=tmp_path)


@pytest.mark.parametrize("batch", ["rgb32", "digits8"])
def test_frost_with_textures(tmp_path, batch):
    write_frost_textures(tmp_path)
    images = BATCHES[batch]()[:8]
    out = corrupt(images, "frost", 2, seed=0, frost_dir=tmp_path)
    assert out.shape == images.shape and out.min() >= 0 and out.max() <= 1
    assert torch.equal(out, corrupt(images, "frost", 2, seed=0, frost_dir=str(tmp_path)))
    for value in (0.0, 1.0):
        constant = corrupt(torch.full_like(images, value), "frost", 5, seed=0, frost_dir=tmp_path)
        assert constant.min() >= 0 and constant.max() <= 1
    d = distances(images, "frost", frost_dir=tmp_path)
    # 4 and 5 lower the image weight (0.85, 0.75) more than they raise the frost weight,
    # so beyond 3 the pixel distance depends on how bright the textures are
    assert d[0] < d[1] < d[2], d


# ------------------------------------------------------------------ failure paths


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="gaussian_noise") as info:
        corrupt(natural_images(1, 32, False), "rain", 1, seed=0)
    assert "jpeg_compression" in str(info.value)


@pytest.mark.parametrize("severity", [0, 6, -1, 2.5, 2.0, True, "3"])
def test_bad_severity_lists_valid_values(severity):
    with pytest.raises(ValueError, match=r"severity must be an integer in \[1, 5\]"):
        corrupt(natural_images(1, 32, False), "fog", severity, seed=0)


@pytest.mark.parametrize("seed", [-1, 1.5, None, True])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed"):
        corrupt(natural_images(1, 32, False), "fog", 1, seed=seed)


@pytest.mark.parametrize(
    "images, message",
    [
        (torch.zeros(2, 32, 32), r"\(N, C, H, W\)"),
        (torch.zeros(2, 2, 32, 32), r"C in"),
        (torch.zeros(2, 3, 4, 4), "at least 8x8"),
        (torch.full((1, 3, 8, 8), 1.5), r"\[0, 1\]"),
        (torch.zeros(1, 3, 8, 8, dtype=torch.uint8), "floating-point"),
    ],
)
def test_bad_images(images, message):
    with pytest.raises(ValueError, match=message):
        corrupt(images, "contrast", 1, seed=0)


# ------------------------------------------------------------------ building blocks


def test_rescale_kernel_keeps_mass_and_identity():
    kernel = ops.disk_kernel(1.5, 0.1)
    assert torch.equal(ops.rescale_kernel(kernel, 1.0), kernel)
    for scale in (0.5, 0.935, 1.41):
        resized = ops.rescale_kernel(kernel, scale)
        assert float(resized.sum()) == pytest.approx(1.0, abs=1e-6)
        assert resized.shape[0] % 2 == 1
    assert ops.rescale_kernel(kernel, 0.5).max() < 1  # still a blur, not the identity


def test_motion_blur_smears_a_point_along_its_angle():
    image = torch.zeros(2, 1, 21, 21)
    image[:, :, 10, 10] = 1.0
    out = ops.motion_blur(image, radius=6, sigma=2, angles_deg=torch.tensor([0.0, 90.0]))
    assert float(out[0].sum()) == pytest.approx(1.0, abs=1e-5)
    assert out[0, 0, 10].sum() == pytest.approx(1.0, abs=1e-5)  # 0 degrees: one row
    assert out[1, 0, :, 10].sum() == pytest.approx(1.0, abs=1e-5)  # 90 degrees: one column


def test_canny_and_distance_on_a_square():
    image = torch.zeros(2, 24, 24)
    image[0, 8:16, 8:16] = 200.0
    edges = ops.canny_edges(image, 50, 150)
    assert edges[0].any() and not edges[1].any()
    assert not edges[0, 11:13, 11:13].any() and not edges[0, :4].any()
    distance = ops.distance_to_edges(edges, cap=5.0)
    expected = np.minimum(ndimage.distance_transform_edt(~edges[0].numpy()), 5.0)
    np.testing.assert_allclose(distance[0].numpy(), expected, rtol=1e-6)
    assert torch.all(distance[1] == 5.0)


def test_equalize_histogram_spreads_values():
    image = torch.tensor([[[0.0, 0.0], [10.0, 20.0]], [[7.0, 7.0], [7.0, 7.0]]])
    out = ops.equalize_histogram(image)
    assert out[0].tolist() == [[0.0, 0.0], [128.0, 255.0]]
    assert torch.all(out[1] == 7.0)

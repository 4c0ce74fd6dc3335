"""The papers' architectures: parameter counts against the published ones, the shared
feature/head interface at every image size, and their options."""

import pytest
import torch

from calib_pipeline.models import MODELS, build_model, model_from_checkpoint, model_names
from calib_pipeline.models.resnet import Bottleneck, ZeroPadShortcut


def on_meta(name: str, *, channels: int = 3, size: int = 32, classes: int = 10, **params):
    """Build without allocating or initialising weights (shapes and counts only)."""
    with torch.device("meta"):
        return build_model(
            name, in_channels=channels, num_classes=classes, image_size=size, **params
        )


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# torchvision's documented ImageNet counts, turned into CIFAR ones: the 7×7 stem conv
# (3·64·49 = 9,408) becomes 3×3 (3·64·9 = 1,728) and the 1000-class head (fc_in·1000 + 1000)
# a 10-class one (fc_in·10 + 10).
CIFAR_STEM = -9_408 + 1_728
BOTTLENECK_HEAD = -2_049_000 + 20_490
STAGE3_BOTTLENECK = 1024 * 256 + 256 * 256 * 9 + 256 * 1024 + 2 * (256 + 256 + 1024)
# torchvision vgg16_bn's three FC layers: 25088·4096 + 4096·4096 + 4096·1000 + biases
VGG_CLASSIFIER = 25088 * 4096 + 4096 * 4096 + 4096 * 1000 + 4096 + 4096 + 1000

# (name, options, expected, tolerance): exact where the count follows from a published exact
# one, half a unit of the last digit where the published figure is rounded. 10 classes.
COUNTS = [
    # He et al. 2016, Table 6 (option A shortcuts): 0.27M, 0.46M, 0.85M, 1.7M
    pytest.param("resnet20", {"shortcut": "zero_pad"}, 270_000, 5_000, id="resnet20-A"),
    pytest.param("resnet32", {"shortcut": "zero_pad"}, 460_000, 5_000, id="resnet32-A"),
    pytest.param("resnet56", {"shortcut": "zero_pad"}, 850_000, 5_000, id="resnet56-A"),
    pytest.param("resnet110", {"shortcut": "zero_pad"}, 1_700_000, 50_000, id="resnet110-A"),
    pytest.param("resnet110", {}, 1_700_000, 50_000, id="resnet110-projection"),
    # torchvision resnet18: 11,689,512 (the meta-regularisation paper's backbone)
    pytest.param("resnet18", {}, 11_689_512 + CIFAR_STEM - 513_000 + 5_130, 0, id="resnet18"),
    # torchvision resnet50: 25,557,032 -> 23,520,842 (Mukhoti et al.'s CIFAR ResNet-50)
    pytest.param("resnet50", {}, 25_557_032 + CIFAR_STEM + BOTTLENECK_HEAD, 0, id="resnet50"),
    # the focal-loss code's resnet110: torchvision resnet101 (44,549,160) with 26 instead of
    # 23 stage-3 bottlenecks -> 45,864,522; no published count
    pytest.param(
        "resnet110_bottleneck",
        {},
        44_549_160 + 3 * STAGE3_BOTTLENECK + CIFAR_STEM + BOTTLENECK_HEAD,
        0,
        id="resnet110_bottleneck",
    ),
    # Zagoruyko & Komodakis 2016, Tables 2 and 4: WRN-28-10 36.5M. WRN-26-10 has no
    # published count; it has the same convolutions (4 blocks per stage), see below.
    pytest.param("wrn_28_10", {}, 36_500_000, 50_000, id="wrn_28_10"),
    pytest.param("wrn_26_10", {}, 36_500_000, 50_000, id="wrn_26_10"),
    # torchvision densenet121: 7,978,856 (k = 32), whose stem also has a BN (128 parameters)
    # the CIFAR stem lacks -> 6,956,298 ≈ 7.0M
    pytest.param(
        "densenet121", {}, 7_978_856 + CIFAR_STEM - 128 - 1_025_000 + 10_250, 0, id="densenet121"
    ),
    # torchvision vgg16_bn: 138,365,992 minus the FC layers plus one 512 -> 10 head: 14,728,266
    pytest.param("vgg16_bn", {}, 138_365_992 - VGG_CLASSIFIER + 5_130, 0, id="vgg16_bn"),
]


@pytest.mark.parametrize(("name", "options", "expected", "tolerance"), COUNTS)
def test_parameter_counts_match_the_published_ones(name, options, expected, tolerance):
    assert abs(count(on_meta(name, **options)) - expected) <= tolerance


def test_parameter_counts_differ_by_what_the_variants_add():
    # projection shortcuts: 1×1 conv + BN on the two widenings, 16·32 + 2·32 + 32·64 + 2·64
    projection = count(on_meta("resnet110")) - count(on_meta("resnet110", shortcut="zero_pad"))
    assert projection == 2_752
    # post-activation WRN-26-10 vs pre-activation WRN-28-10, same convolutions; BN channels:
    # stem 16 + 2 per block conv (2·(160 + 320 + 640)·4) + shortcuts (160 + 320 + 640) = 10,096
    # vs 2 per block on its input and output channels + the final 640 = 8,976
    wide = count(on_meta("wrn_26_10")) - count(on_meta("wrn_28_10"))
    assert wide == 2 * (10_096 - 8_976)


@pytest.mark.parametrize("name", model_names())
def test_every_architecture_runs_a_real_batch_at_32px(name):
    torch.manual_seed(0)
    model = build_model(name, in_channels=3, num_classes=7, image_size=32).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        features = model.forward_features(x)
        logits = model(x)
    assert features.shape == (2, model.feature_dim) and logits.shape == (2, 7)
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(logits, model.head(features))


@pytest.mark.parametrize("name", model_names())
def test_every_architecture_takes_greyscale_8px_and_28px_images(name):
    # digits (8 px) and (Fashion-)MNIST (28 px): odd sizes and maps that shrink to 1 px
    for size in (8, 28):
        model = build_model(name, in_channels=1, num_classes=10, image_size=size).eval()
        with torch.no_grad():
            features = model.forward_features(torch.randn(2, 1, size, size))
        assert features.shape == (2, model.feature_dim), size
        assert model.head(features).shape == (2, 10)


@pytest.mark.parametrize("name", model_names())
def test_every_architecture_takes_64px_tiny_imagenet_images(name):
    # shapes only (meta tensors): a real 64-px pass through a WRN-28-10 costs seconds on a CPU
    model = on_meta(name, size=64, classes=200)
    features = model.forward_features(torch.empty(2, 3, 64, 64, device="meta"))
    assert features.shape == (2, model.feature_dim)
    assert model.head(features).shape == (2, 200)


def test_tiny_imagenet_variant_of_the_focal_loss_code_pools_to_2x2():
    model = on_meta("resnet50", size=64, classes=200, pool_grid=2)
    assert model.feature_dim == 2048 * 4 and model.head.in_features == 8192
    assert model(torch.empty(2, 3, 64, 64, device="meta")).shape == (2, 200)


def test_resnet110_bottleneck_has_110_layers_in_36_bottlenecks():
    model = on_meta("resnet110_bottleneck")
    assert sum(isinstance(m, Bottleneck) for m in model.modules()) == 36  # 3·36 + 2 = 110


def test_zero_pad_shortcut_subsamples_and_pads_channels_with_zeros():
    shortcut = ZeroPadShortcut(16, 32, stride=2)
    x = torch.randn(2, 16, 8, 8)
    out = shortcut(x)
    assert out.shape == (2, 32, 4, 4)
    assert torch.equal(out[:, 8:24], x[:, :, ::2, ::2])
    assert not out[:, :8].any() and not out[:, 24:].any()
    model = on_meta("resnet32", shortcut="zero_pad")
    assert not any("shortcut" in key for key in model.state_dict())


def test_wide_resnet_styles_and_depth_rules():
    # the focal-loss code's WRN-26-10 is the post-activation wrn of depth 26
    assert count(on_meta("wrn_26_10")) == count(on_meta("wrn", depth=26, preactivation=False))
    assert count(on_meta("wrn_28_10")) == count(on_meta("wrn"))
    pre = r"pre-activation \(6N\+4\) wide ResNet needs depth in 10, 16, 22, 28.*got 26"
    with pytest.raises(ValueError, match=pre):
        build_model("wrn", in_channels=3, num_classes=10, image_size=32, depth=26)
    post = r"post-activation \(6N\+2\).*8, 14, 20, 26.*got 28"
    with pytest.raises(ValueError, match=post):
        post_activation_28 = {"depth": 28, "preactivation": False}
        MODELS.check("wrn", in_channels=1, num_classes=2, image_size=8, **post_activation_28)


def test_wide_resnet_dropout_is_active_in_training_only():
    torch.manual_seed(0)
    options = {"depth": 10, "widen_factor": 1, "dropout": 0.5}
    model = build_model("wrn", in_channels=3, num_classes=5, image_size=8, **options)
    x = torch.randn(4, 3, 8, 8)
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("resnet32", {"shortcut": "A"}, "shortcut must be one of 'projection', 'zero_pad', got"),
        ("resnet50", {"pool_grid": 0}, "pool_grid must be an integer >= 1, got 0"),
        ("wrn", {"widen_factor": 2.5}, "widen_factor must be an integer >= 1, got 2.5"),
        ("wrn_28_10", {"dropout": 1.0}, r"dropout must be in \[0.0, 1.0\), got 1.0"),
        ("wrn", {"preactivation": "yes"}, "preactivation must be true or false, got 'yes'"),
        ("densenet121", {"growth_rate": 0}, "growth_rate must be an integer >= 1, got 0"),
        ("vgg16_bn", {"depth": 19}, r"unknown parameter\(s\) \['depth'\]; it accepts: in_chan"),
        ("wrn_26_10", {"depth": 28}, r"unknown parameter\(s\) \['depth'\]"),
    ],
)
def test_bad_options_fail_when_checked_and_when_built(name, options, message):
    # MODELS.check is what the pipelines run at construction time, before any training
    with pytest.raises(ValueError, match=message):
        MODELS.check(name, in_channels=3, num_classes=10, image_size=32, **options)
    with pytest.raises(ValueError, match=message):
        on_meta(name, **options)


def test_checkpoint_round_trip_with_architecture_options():
    params = {"depth": 8, "widen_factor": 2, "dropout": 0.3, "preactivation": False}
    model = build_model("wrn", in_channels=1, num_classes=4, image_size=8, **params).eval()
    checkpoint = {
        "architecture": {
            "name": "wrn",
            "params": params,
            "in_channels": 1,
            "num_classes": 4,
            "image_size": 8,
        },
        "state_dict": model.state_dict(),
    }
    x = torch.randn(3, 1, 8, 8)
    assert torch.equal(model_from_checkpoint(checkpoint)(x), model(x))

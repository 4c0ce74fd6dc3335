"""Writes the papers' run files, paper_runs/<env>/<study>_<network>.yml, from one template per
paper protocol below, so that what several files share (a paper's schedule, its notes, the
same run on CIFAR-10 and CIFAR-100) is written once.

    python paper_runs/generate.py           # rewrite the files after changing a template
    python paper_runs/generate.py --check   # exit 1, naming each file that differs

`kedro run --config=FILE` reads a run file as plain YAML (no interpolation, no includes), so
each file is written out in full; tests/test_paper_runs.py checks that the committed files
are the generated ones. To add a dataset, add its env to a template's `envs` (and its name
to DATASETS); to add a network or a paper, add a Network or a Protocol to PROTOCOLS.
docs/models.md, "Paper protocols", says which values each paper states.
"""

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

PAPER_RUNS = Path(__file__).resolve().parent

DATASETS = {
    "cifar10": "CIFAR-10",
    "cifar100": "CIFAR-100",
    "svhn": "SVHN",
    "tiny_imagenet": "Tiny-ImageNet",
}

FOOTER = """\
Kedro's --params would replace this file's params rather than add to them (the project
refuses the two together): for more overrides, edit a copy. docs/models.md, "Paper protocols".
Written by paper_runs/generate.py: change its template there and rerun it, not this file.
"""


@dataclass(frozen=True)
class Network:
    name: str  # the file is <study>_<name>.yml
    title: str  # follows "<dataset>, " in the first line; each "\n" starts a comment line
    model: dict


@dataclass(frozen=True)
class Protocol:
    """A paper's protocol: one run file per env and network."""

    study: str  # the pipeline the files run
    paper: str  # the title's first words
    envs: tuple[str, ...]
    networks: tuple[Network, ...]
    notes: str  # the header under the title: what the paper states, what is assumed
    params: dict  # the run's params besides `model`


RESNET18 = Network("resnet18", "ResNet-18.", {"name": "resnet18", "params": {}})
RESNET32_OPTION_A = Network(
    "resnet32",
    "ResNet-32 with option-A (zero-padding)\nshortcuts, He et al.'s CIFAR network.",
    {"name": "resnet32", "params": {"shortcut": "zero_pad"}},
)
CIFAR_DATASETS = ("cifar10", "cifar100")
FIVE_SEEDS = [0, 1, 2, 3, 4]

# The meta-regularisation paper's schedule (§5), which Mukhoti et al. state too.
META_REGULARISATION_TRAINING = {
    "epochs": 350,
    "batch_size": 128,
    "lr": 0.1,
    "momentum": 0.9,
    "weight_decay": 5.0e-4,
    "milestones": [150, 250],
    "lr_decay": 0.1,
    "augment": "crop_flip",
}
# Wang et al.'s authors' code (their appendix is not in the seed text).
WANG_TRAINING = {
    "epochs": 200,
    "batch_size": 512,
    "lr": 0.1,
    "momentum": 0.9,
    "weight_decay": 1.0e-4,
    "milestones": [100, 150],
    "lr_decay": 0.1,
    "augment": "crop_flip",
}
MUKHOTI_NOTES = """\
From the paper (App. B): SGD, momentum 0.9, batch 128, 350 epochs, lr 0.1 -> 0.01 -> 0.001
after epochs 150 and 250, random crops and flips, 45k/5k/10k split (the env's). Not stated
in the paper: weight decay (5e-4 here, the env's) and the number of seeds (the env's 5).
The authors' scripts train Brier loss longer in places (e.g. 550 epochs for WRN on
CIFAR-10); the paper states one schedule for every loss, used here.
"""
META_REGULARISATION = "Towards unbiased calibration using meta-regularization"
MUKHOTI = "Mukhoti et al., focal loss"
WANG = "Wang et al., calibratability"

PROTOCOLS = (
    Protocol(
        study="focal_meta",
        paper=META_REGULARISATION,
        envs=CIFAR_DATASETS,
        networks=(RESNET18,),
        notes="""\
From the paper (§5): ResNet-18, batch 128, random crops and flips, SGD lr 0.1, momentum
0.9, weight decay 5e-4, up to 350 epochs, lr ÷10 at 150 and 250, best-validation-error
selection (the fm_* methods), 8:1:1 train/val/meta-val, 5 seeds. The env's defaults,
pinned here.
""",
        params={"training": META_REGULARISATION_TRAINING, "seeds": FIVE_SEEDS},
    ),
    Protocol(
        study="focal_meta",
        paper=META_REGULARISATION,
        envs=("tiny_imagenet",),
        networks=(RESNET18,),
        notes="""\
The paper's pipeline "for all three datasets is identical" (§5): its CIFAR protocol, the
env's defaults, pinned here.
""",
        params={"training": META_REGULARISATION_TRAINING, "seeds": FIVE_SEEDS},
    ),
    Protocol(
        study="focal",
        paper=MUKHOTI,
        envs=CIFAR_DATASETS,
        networks=(
            Network(
                "densenet121",
                "DenseNet-121 (the CIFAR variant of the authors'\ncode).",
                {"name": "densenet121", "params": {}},
            ),
            Network(
                "resnet110",
                "ResNet-110 -- the authors' code's bottleneck\nnetwork (45.9M parameters); the"
                ' paper says only "ResNet-110 (He et al., 2016)", whose\nbasic-block network is'
                " `resnet110`.",
                {"name": "resnet110_bottleneck", "params": {}},
            ),
            Network(
                "resnet50",
                "ResNet-50 (the CIFAR stem of the authors' code).",
                {"name": "resnet50", "params": {}},
            ),
            Network(
                "wrn_26_10",
                "Wide-ResNet-26-10 (the authors' code's post-\nactivation network).",
                {"name": "wrn_26_10", "params": {}},
            ),
        ),
        notes=MUKHOTI_NOTES,
        params={"training": META_REGULARISATION_TRAINING},
    ),
    Protocol(
        study="focal",
        paper=MUKHOTI,
        envs=("tiny_imagenet",),
        networks=(
            Network("resnet50", "ResNet-50.", {"name": "resnet50", "params": {"pool_grid": 2}}),
        ),
        notes="""\
From the paper (App. B): 100 epochs, lr 0.1 -> 0.01 -> 0.001 after epochs 40 and 60, 50
images per class held out for validation (90k/10k, the env's), the official val set as the
test set. From the authors' code: the network pools to 2x2 and flattens (8,192 features,
`pool_grid: 2`), and batch 64 (train_scripts/tinyImageNet.sh; the paper's batch-size
sentence is garbled in the seed text). Not stated: momentum, weight decay, augmentation
(the env's 0.9, 5e-4, crops and flips).
""",
        params={
            "training": {
                **META_REGULARISATION_TRAINING,
                "epochs": 100,
                "batch_size": 64,
                "milestones": [40, 60],
            }
        },
    ),
    Protocol(
        study="soft_calibration",
        paper="Karandikar et al., soft calibration objectives",
        envs=CIFAR_DATASETS,
        networks=(Network("wrn_28_10", "Wide-ResNet-28-10.", {"name": "wrn_28_10", "params": {}}),),
        notes="""\
From the paper (§5.1, App. E): WRN-28-10, 200 epochs, SGD with momentum 0.9, lr 0.1, "a
learning rate schedule which is fixed for each dataset across training losses" (not
given), means over 10 runs. The schedule below is Zagoruyko & Komodakis' own for WRN on
CIFAR (200 epochs, lr x0.2 after 60, 120 and 160, weight decay 5e-4, batch 128): an
assumption where the paper is silent. The paper also tunes κ, T, β and the L2 coefficient
λ per cell; a `sweep` in conf/base/parameters_methods.yml varies κ, T or β. The
composite's own `l2` term adds to this weight decay, so to sweep λ alone set
training.weight_decay to 0 in a copy of this file.
""",
        params={
            "training": {
                "epochs": 200,
                "batch_size": 128,
                "lr": 0.1,
                "momentum": 0.9,
                "weight_decay": 5.0e-4,
                "milestones": [60, 120, 160],
                "lr_decay": 0.2,
                "augment": "crop_flip",
            },
            "seeds": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        },
    ),
    Protocol(
        study="calibratability",
        paper=WANG,
        envs=CIFAR_DATASETS,
        networks=(
            Network(
                "resnet110",
                "the appendix's ResNet-110: the paper names no\nvariant, and the authors' code"
                " points to the focal-loss code's ResNet-110, this bottleneck\nnetwork.",
                {"name": "resnet110_bottleneck", "params": {}},
            ),
            RESNET32_OPTION_A,
        ),
        notes="""\
The paper defers its training details to an appendix; from it only "the learning rate
drops by a factor of 10" after epoch 100 on CIFAR-100 (§5.1) and 5 runs. The rest is the
authors' code (batch 512, 200 epochs, weight decay 1e-4, lr ÷10 after 100 and 150).
""",
        params={"training": WANG_TRAINING},
    ),
    Protocol(
        study="calibratability",
        paper=WANG,
        envs=("svhn",),
        networks=(RESNET32_OPTION_A,),
        notes="""\
The paper defers its training details to an appendix; this is the authors' CIFAR code's
schedule (batch 512, 200 epochs, weight decay 1e-4, lr ÷10 after 100 and 150) without
augmentation (flips would mirror digits; the env's choice). 5 runs (the paper's).
""",
        params={"training": {**WANG_TRAINING, "augment": "none"}, "seeds": FIVE_SEEDS},
    ),
    Protocol(
        study="dark_side",
        paper="Singh et al., the dark side of calibration",
        envs=CIFAR_DATASETS,
        networks=(
            Network("densenet121", "DenseNet-121.", {"name": "densenet121", "params": {}}),
            Network("resnet50", "ResNet-50.", {"name": "resnet50", "params": {}}),
            Network(
                "vgg16_bn",
                'VGG-16 with batch norm: the paper says\n"VGG-16"; batch norm is this'
                " project's reading (A.2 states it only for its ConfidNet experiment).",
                {"name": "vgg16_bn", "params": {}},
            ),
        ),
        notes="""\
From the paper (§4, A.3): 300 epochs, lr 0.1 decayed after epochs 150 and 225 by a factor
of 5 (baseline CE, ERL, Mixup) or 10 (LS, FL), 3 trials. Not stated: the optimizer,
momentum, weight decay, batch size and augmentation (the env's SGD 0.9, 5e-4, 128, crops
and flips). `methods` sets the ÷5 of CE (the study's `ce`), ERL and Mixup.
""",
        params={
            "training": {
                **META_REGULARISATION_TRAINING,
                "epochs": 300,
                "milestones": [150, 225],
            },
            "seeds": [0, 1, 2],
            "methods": {
                method: {"training": {"lr_decay": 0.2}} for method in ("ce", "erl", "mixup")
            },
        },
    ),
)


def render(protocol: Protocol, env: str, network: Network) -> str:
    """The text of one run file: its header of comments, then the `run:` section."""
    command = f"  kedro run --config=paper_runs/{env}/{protocol.study}_{network.name}.yml"
    header = "\n".join(
        [
            f"{protocol.paper} -- {DATASETS[env]}, {network.title}",
            "",
            protocol.notes.rstrip("\n"),
            "",
            command,
            "",
            FOOTER.rstrip("\n"),
        ]
    )
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    run = {
        "env": env,
        "pipelines": protocol.study,
        "params": {"model": network.model, **protocol.params},
    }
    return comments + yaml.safe_dump(
        {"run": run}, default_flow_style=None, sort_keys=False, allow_unicode=True, width=100
    )


def run_files() -> dict[str, str]:
    """Every run file's path under paper_runs/ (``<env>/<study>_<network>.yml``) -> its text."""
    files: dict[str, str] = {}
    for protocol in PROTOCOLS:
        for env in protocol.envs:
            for network in protocol.networks:
                path = f"{env}/{protocol.study}_{network.name}.yml"
                if path in files:
                    raise ValueError(f"two templates write paper_runs/{path}")
                files[path] = render(protocol, env, network)
    return files


def stale_files(folder: Path = PAPER_RUNS) -> list[str]:
    """What in ``folder`` is not as generated: a differing or missing file, or a run file
    no template writes."""
    expected = run_files()
    present = {path.relative_to(folder).as_posix() for path in folder.glob("*/*.yml")}
    problems = [
        f"{path}: differs from its template"
        for path in sorted(present & set(expected))
        if (folder / path).read_text(encoding="utf-8") != expected[path]
    ]
    problems += [f"{path}: missing" for path in sorted(set(expected) - present)]
    problems += [f"{path}: no template writes it" for path in sorted(present - set(expected))]
    return problems


def write(folder: Path = PAPER_RUNS) -> list[str]:
    """Writes every run file under ``folder``; returns the paths whose text changed."""
    changed = []
    for path, text in run_files().items():
        target = folder / path
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is not as generated"
    )
    parser.add_argument(
        "--folder", type=Path, default=PAPER_RUNS, help="where the run files are (default: here)"
    )
    args = parser.parse_args(argv)
    if args.check:
        problems = stale_files(args.folder)
        for problem in problems:
            print(f"paper_runs/{problem}")
        if problems:
            print(
                "run `python paper_runs/generate.py` (after changing its templates, not the files)"
            )
        return 1 if problems else 0
    changed = write(args.folder)
    print(f"{len(changed)} of {len(run_files())} run files rewritten under {args.folder}")
    for problem in stale_files(args.folder):  # a run file that no template writes
        print(f"paper_runs/{problem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Papers' claims as data: the YAML format, its validation, and its resolution in a study.

A claims file (``reports/claims/<paper>.yml``) lists a paper's qualitative claims, each
with its source (table / figure / section), the paper's own words, the quantity it is
about and the comparison it makes; ``docs/claims.md`` describes the format with a worked
example. :func:`parse_claim` checks one entry without any study, :func:`resolve_claims`
turns entries into concrete :class:`Claim` s for one study -- sweep groups and method
lists expanded, names checked against the study's methods and calibrators -- and
:func:`check_study_claims` is what the pipelines call when they are built.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

import yaml

from calib_pipeline.calibration.metrics import metric_names
from calib_pipeline.reports.common import UNCALIBRATED, UNSHIFTED
from calib_pipeline.reports.ensembles import CALIBRATE_THEN_POOL_SUFFIX
from calib_pipeline.reports.registry import StudyOutline

CLAIMS_DIR = Path(__file__).resolve().parent / "claims"
EXPECTS = ("lower", "higher", "within", "increasing", "decreasing")
TRENDS = ("increasing", "decreasing")
TESTS = ("two-sided", "one-sided")
OVER = ("members", "severity")
CORRUPTED = "corrupted"  # every corruption (severity >= 1), averaged per seed
ALL_SEVERITIES = "all"
EPOCH_ANCHORS = ("first", "last", "first_lr_drop")
KINDS = ("metric", "temperature", "history")  # what a quantity measures
QUANTITY_KEYS = (
    "metric",
    "split",
    "calibrator",
    "shift",
    "severity",
    "temperature",
    "history",
    "at",
    "change",
    "distance_from",
)
SIDE_KEYS = ("method", *QUANTITY_KEYS)
CLAIM_KEYS = (
    "id",
    "source",
    "quote",
    "quote_from",
    "note",
    "expect",
    "a",
    "b",
    "threshold",
    "tolerance",
    "over",
    "quantity",
    "test",
    "datasets",
)
FILE_KEYS = ("paper", "title", "seed_file", "text", "protocol", "claims")
#: ``text`` of a paper beyond the seeds: where its quotes were checked, and when.
TEXT_KEYS = ("url", "checked")


@dataclass(frozen=True)
class Quantity:
    """What is measured per seed of one method.

    Exactly one kind: ``metric`` (a tidy-table metric, or a weighted sum of metrics as
    ``((name, weight), ...)``, on ``split`` / ``calibrator`` / ``shift`` / ``severity``),
    ``temperature`` (the fitted T of that calibrator key) or ``history`` (a per-epoch
    column, its value ``at`` one epoch or its ``change`` between two). ``distance_from``
    replaces every value v by ``|v - distance_from|``.
    """

    metric: tuple[tuple[str, float], ...] = ()
    split: str = "test"
    calibrator: str = UNCALIBRATED
    shift: str = UNSHIFTED
    severity: int | str = 0
    temperature: str | None = None
    history: str | None = None
    epochs: tuple[int | str, ...] = ()
    distance_from: float | None = None

    @property
    def kind(self) -> str:
        return "temperature" if self.temperature else "history" if self.history else "metric"

    @property
    def calibrator_keys(self) -> tuple[str, ...]:
        """The calibrator keys the quantity reads (``none`` excluded)."""
        key = self.temperature if self.kind == "temperature" else self.calibrator
        return () if self.kind == "history" or key == UNCALIBRATED else (key,)


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a method (or, for a trend over members, the ordered
    members) and its quantity."""

    method: str | tuple[str, ...]
    quantity: Quantity


@dataclass(frozen=True)
class Claim:
    """One checkable claim of a paper (or of a study's own list), resolved for a study."""

    paper: str
    id: str
    source: str
    quote: str
    expect: str
    a: Side
    b: Side | None = None
    threshold: float | None = None
    tolerance: float | None = None
    over: str | None = None
    test: str = "two-sided"
    datasets: tuple[str, ...] = ()
    note: str = ""

    @property
    def sign(self) -> int:
        """+1 when the claim expects a positive effect, -1 a negative one, 0 for ``within``."""
        return {"lower": -1, "decreasing": -1, "higher": 1, "increasing": 1}.get(self.expect, 0)


# --- parsing one entry -------------------------------------------------------------------


def _fail(where: str, message: str) -> NoReturn:
    raise ValueError(f"{where}: {message}")


def _known(where: str, entry: Any, valid: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(entry, Mapping):
        _fail(where, f"must be a mapping, got {entry!r}")
    unknown = sorted(set(entry) - set(valid))
    if unknown:
        _fail(where, f"unknown key(s) {unknown}; valid keys: {', '.join(valid)}")
    return entry


def _number(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(where, f"{name} must be a finite number, got {value!r}")
    return float(value)


def _epoch(where: str, value: Any) -> int | str:
    if value in EPOCH_ANCHORS or (
        isinstance(value, int) and not isinstance(value, bool) and value >= 1
    ):
        return value
    return _fail(
        where,
        f"an epoch must be one of {', '.join(EPOCH_ANCHORS)} or an integer >= 1, got {value!r}",
    )


def _metric(where: str, value: Any) -> tuple[tuple[str, float], ...]:
    terms = {value: 1.0} if isinstance(value, str) else value
    if not isinstance(terms, Mapping) or not terms:
        _fail(where, f"metric must be a metric name or a mapping name -> weight, got {value!r}")
    valid = metric_names()
    unknown = sorted(set(terms) - set(valid))
    if unknown:
        _fail(where, f"unknown metric(s) {unknown}; valid metrics: {', '.join(valid)}")
    return tuple((name, _number(where, f"the weight of {name}", w)) for name, w in terms.items())


def _severity(where: str, value: Any) -> int | str:
    if value == ALL_SEVERITIES or (
        isinstance(value, int) and not isinstance(value, bool) and value >= 0
    ):
        return value
    return _fail(where, f"severity must be an integer >= 0 or {ALL_SEVERITIES!r}, got {value!r}")


def _text(where: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(where, f"{name} must be a non-empty string, got {value!r}")
    return value


def parse_quantity(where: str, spec: Mapping[str, Any]) -> Quantity:
    """A :class:`Quantity` from the quantity keys of a side (defaults: test ECE, raw)."""
    kinds = [k for k in KINDS if k in spec]
    if len(kinds) > 1:
        _fail(where, f"give one of metric, temperature or history, got {kinds}")
    fields: dict[str, Any] = {}
    if "history" in spec:
        fields["history"] = _text(where, "history", spec["history"])
        if ("at" in spec) == ("change" in spec):
            _fail(
                where,
                "a history quantity needs exactly one of 'at' (an epoch) or 'change' ([from, to])",
            )
        change = spec.get("change")
        if change is not None and (not isinstance(change, (list, tuple)) or len(change) != 2):
            _fail(where, f"change must be [from, to], got {change!r}")
        fields["epochs"] = tuple(_epoch(where, e) for e in (change or [spec["at"]]))
    elif "temperature" in spec:
        fields["temperature"] = _text(where, "temperature", spec["temperature"])
    else:
        fields["metric"] = _metric(where, spec.get("metric", "ece"))
        for name in ("split", "calibrator", "shift"):
            if name in spec:
                fields[name] = _text(where, name, spec[name])
        shift = fields.get("shift", UNSHIFTED)
        default = 0 if shift == UNSHIFTED else ALL_SEVERITIES
        fields["severity"] = _severity(where, spec.get("severity", default))
    stray = sorted(set(spec) & {"split", "calibrator", "shift", "severity"} - set(fields))
    stray += sorted(
        set(spec) & {"at", "change"} - ({"at", "change"} if "history" in spec else set())
    )
    if stray:
        _fail(where, f"key(s) {stray} do not apply to a {kinds[0] if kinds else 'metric'} quantity")
    if "distance_from" in spec:
        fields["distance_from"] = _number(where, "distance_from", spec["distance_from"])
    return Quantity(**fields)


def _names(where: str, what: str, value: Any) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if (
        not isinstance(names, (list, tuple))
        or not names
        or not all(isinstance(n, str) for n in names)
    ):
        _fail(where, f"{what} must be a name or a non-empty list of names, got {value!r}")
    return tuple(names)


def _side(where: str, raw: Any, shared: Mapping[str, Any]) -> dict[str, Any]:
    side = _known(where, raw, SIDE_KEYS)
    if "method" not in side:
        _fail(where, "names no method")
    own = {k: v for k, v in side.items() if k != "method"}
    if set(KINDS) & set(own):  # a side naming its kind replaces the shared quantity's kind
        shared = {k: v for k, v in shared.items() if k not in KINDS}
    return {
        "methods": _names(where, "method", side["method"]),
        "quantity": parse_quantity(where, {**shared, **own}),
    }


def _relation(where: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    expect = entry.get("expect")
    if expect not in EXPECTS:
        _fail(where, f"expect must be one of {', '.join(EXPECTS)}, got {expect!r}")
    over = entry.get("over")
    if (expect in TRENDS) != (over is not None):
        _fail(
            where,
            "a trend (increasing / decreasing) needs 'over' (members or severity), "
            "and only a trend takes it",
        )
    if over is not None and over not in OVER:
        _fail(where, f"over must be one of {', '.join(OVER)}, got {over!r}")
    if over is None and ("b" in entry) == ("threshold" in entry):
        _fail(
            where,
            "a comparison needs exactly one of 'b' (another quantity) or 'threshold' (a number)",
        )
    if over is not None and "threshold" in entry:
        _fail(where, "a trend compares levels with each other, not with a threshold")
    if (expect == "within") != ("tolerance" in entry):
        _fail(where, "'within' needs a tolerance, and only 'within' takes one")
    tolerance = entry.get("tolerance")
    if tolerance is not None and _number(where, "tolerance", tolerance) <= 0:
        _fail(where, f"tolerance must be > 0, got {tolerance!r}")
    test = entry.get("test", "two-sided")
    if test not in TESTS:
        _fail(where, f"test must be one of {', '.join(TESTS)}, got {test!r}")
    return {"expect": expect, "over": over, "test": test, "tolerance": tolerance}


def parse_claim(raw: Any, paper: str) -> dict[str, Any]:
    """Check one claim entry and return it normalised (methods not yet resolved).

    Raises:
        ValueError: naming the paper and the claim id, for an unknown key, a missing id /
            source / quote, an unknown metric, an incoherent relation (e.g. a trend
            without ``over``, a comparison with both ``b`` and ``threshold``) or a bad value.
    """
    entry = _known(f"a claim of {paper!r}", raw, CLAIM_KEYS)
    claim_id = entry.get("id")
    if not isinstance(claim_id, str) or not claim_id.replace("_", "").isalnum():
        _fail(
            f"a claim of {paper!r}", f"id must be letters, digits and underscores, got {claim_id!r}"
        )
    where = f"claim {paper}:{claim_id}"
    shared = _known(f"{where} quantity", entry.get("quantity", {}), QUANTITY_KEYS)
    parsed = {
        "paper": paper,
        "id": claim_id,
        "source": _text(where, "source", entry.get("source")),
        "quote": _text(where, "quote", entry.get("quote")),
        "quote_from": _text(where, "quote_from", entry.get("quote_from", paper)),
        "note": str(entry.get("note", "")),
        **_relation(where, entry),
        "a": _side(f"{where} side a", entry.get("a"), shared),
        "b": _side(f"{where} side b", entry["b"], shared) if "b" in entry else None,
        "threshold": _number(where, "threshold", entry["threshold"])
        if "threshold" in entry
        else None,
        "datasets": _names(where, "datasets", entry["datasets"]) if "datasets" in entry else (),
    }
    if parsed["over"] == "severity":
        for side in filter(None, (parsed["a"], parsed["b"])):
            if side["quantity"].kind != "metric" or side["quantity"].shift == UNSHIFTED:
                _fail(
                    where,
                    "a trend over severity needs metric quantities on a shift "
                    "(e.g. shift: corrupted)",
                )
    return parsed


# --- files -------------------------------------------------------------------------------


def paper_names() -> list[str]:
    """The papers with a claims file, sorted."""
    return sorted(p.stem for p in CLAIMS_DIR.glob("*.yml"))


@cache
def paper_title(paper: str) -> str:
    """The ``title`` of a paper's claims file (e.g. "Mukhoti et al. (2020), On using focal
    loss ..."); the paper's name where the file has none.

    Raises:
        ValueError: an unknown paper (lists the valid ones).
    """
    load_paper(paper)
    content = yaml.safe_load((CLAIMS_DIR / f"{paper}.yml").read_text(encoding="utf-8"))
    return str(content.get("title") or paper)


def _paper_text(where: str, content: Mapping[str, Any]) -> dict[str, str]:
    """Where the file's quotes come from: ``seed_file`` (a paper of ``seeds/``, whose text
    the test suite checks every quote against) or ``text: {url, checked}`` (a paper beyond
    the seeds: the public text its quotes were checked against by hand, and the date)."""
    if ("seed_file" in content) == ("text" in content):
        _fail(where, "give exactly one of seed_file (a paper in seeds/) or text: {url, checked}")
    if "seed_file" in content:
        return {"seed_file": _text(where, "seed_file", content["seed_file"])}
    text = _known(f"{where} text", content["text"], TEXT_KEYS)
    url, checked = str(text.get("url", "")), str(text.get("checked", ""))
    if not url.startswith("https://"):
        _fail(where, f"text.url must be an https:// address of the paper's text, got {url!r}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", checked):
        _fail(where, f"text.checked must be the date the quotes were checked, got {checked!r}")
    return {"url": url, "checked": checked}


@cache
def paper_text(paper: str) -> dict[str, str]:
    """Where ``paper``'s quotes come from: ``{"seed_file": ...}`` or ``{"url", "checked"}``.

    Raises:
        ValueError: an unknown paper (lists the valid ones) or a malformed file.
    """
    load_paper(paper)
    content = yaml.safe_load((CLAIMS_DIR / f"{paper}.yml").read_text(encoding="utf-8"))
    return _paper_text(f"claims file {paper}.yml", content)


@cache
def load_paper(paper: str) -> tuple[dict[str, Any], ...]:
    """Every claim of ``paper`` parsed (:func:`parse_claim`), in file order.

    Raises:
        ValueError: an unknown paper (lists the valid ones), a malformed file, a
            duplicate id or a bad claim.
    """
    if paper not in paper_names():
        raise ValueError(
            f"no claims for paper {paper!r}; papers with claims: {', '.join(paper_names())}"
        )
    content = yaml.safe_load((CLAIMS_DIR / f"{paper}.yml").read_text(encoding="utf-8"))
    _known(f"claims file {paper}.yml", content, FILE_KEYS)
    if content.get("paper") != paper:
        _fail(f"claims file {paper}.yml", f"says paper {content.get('paper')!r}")
    _paper_text(f"claims file {paper}.yml", content)
    claims = tuple(parse_claim(raw, paper) for raw in content.get("claims") or [])
    _no_duplicates(paper, claims)
    return claims


#: The training settings a claims file's ``protocol.datasets`` may state (``training``
#: parameters; what the paper leaves unstated is left out and never compared).
SCHEDULE_KEYS = (
    "epochs",
    "batch_size",
    "lr",
    "momentum",
    "milestones",
    "lr_decay",
    "weight_decay",
    "augment",
    "select",
)


def _schedule_values(where: str, entry: Any) -> dict[str, Any]:
    values = {}
    for key, value in _known(where, entry, SCHEDULE_KEYS).items():
        if key == "milestones":
            epochs = isinstance(value, list) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            )
            if not epochs:
                _fail(where, f"milestones must be a list of epochs, got {value!r}")
            values[key] = [int(v) for v in value]
        elif key in ("epochs", "batch_size"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                _fail(where, f"{key} must be a positive integer, got {value!r}")
            values[key] = value
        elif key in ("augment", "select"):
            values[key] = _text(where, key, value)
        else:
            values[key] = _number(where, key, value)
    return values


def _datasets(where: str, raw: Any, architectures: list[str]) -> dict[str, dict[str, Any]]:
    """``{dataset: {architectures: [...], <setting>: value, ..., methods: {method:
    {<setting>: value}}}}`` checked: the networks the paper trained on that dataset (default:
    every network of the protocol) and the settings it states for it; a method's entry states
    what differs for it (Singh et al. decay CE's rate by 5, LS's by 10)."""
    if not isinstance(raw or {}, Mapping):
        _fail(where, f"datasets must map a dataset to its networks and settings, got {raw!r}")
    datasets: dict[str, dict[str, Any]] = {}
    for dataset, entry in (raw or {}).items():
        here = f"{where}.datasets.{dataset}"
        entry = _known(here, entry or {}, (*SCHEDULE_KEYS, "architectures", "methods"))
        nets = entry.get("architectures", architectures)
        if not isinstance(nets, list) or not set(nets) <= set(architectures) or not nets:
            _fail(
                here, f"architectures must be a non-empty subset of {architectures}, got {nets!r}"
            )
        methods = entry.get("methods") or {}
        if not isinstance(methods, Mapping):
            _fail(here, f"methods must map a method to its own settings, got {methods!r}")
        settings = {k: v for k, v in entry.items() if k not in ("architectures", "methods")}
        datasets[str(dataset)] = {
            "architectures": list(nets),
            "settings": _schedule_values(here, settings),
            "methods": {
                str(m): _schedule_values(f"{here}.methods.{m}", v) for m, v in methods.items()
            },
        }
    return datasets


@cache
def paper_protocol(paper: str) -> dict[str, Any] | None:
    """The networks (``architectures``, as ``models.architecture_tag`` writes them) and the
    ``training`` schedule (one line) ``paper`` used, and per dataset it trained on
    (``datasets``) its networks there, the ``settings`` it states (:data:`SCHEDULE_KEYS`)
    and per-method ones (``methods``), from its claims file; None for a name without a
    claims file (a study's own claims) or a file without ``protocol``.

    Raises:
        ValueError: a malformed ``protocol`` entry.
    """
    if paper not in paper_names():
        return None
    content = yaml.safe_load((CLAIMS_DIR / f"{paper}.yml").read_text(encoding="utf-8"))
    protocol = content.get("protocol")
    if protocol is None:
        return None
    where = f"claims file {paper}.yml, protocol"
    _known(where, protocol, ("architectures", "training", "datasets"))
    architectures, training = protocol.get("architectures"), protocol.get("training")
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        _fail(where, f"architectures must be a list of architecture tags, got {architectures!r}")
    if not isinstance(training, str) or not training.strip():
        _fail(where, f"training must be a one-line description, got {training!r}")
    return {
        "architectures": list(architectures),
        "training": training.strip(),
        "datasets": _datasets(where, protocol.get("datasets"), list(architectures)),
    }


def _no_duplicates(where: str, claims: Sequence[Mapping[str, Any]]) -> None:
    seen: set[str] = set()
    for claim in claims:
        if claim["id"] in seen:
            raise ValueError(f"{where}: claim id {claim['id']!r} appears twice")
        seen.add(claim["id"])


def gather(
    papers: Sequence[str] | None, inline: Sequence[Any] | None, study: str = "study"
) -> list[dict[str, Any]]:
    """The parsed claims of ``papers`` followed by the study's own ``inline`` claims."""
    claims = [c for paper in papers or [] for c in load_paper(paper)]
    own = [parse_claim(raw, study) for raw in inline or []]
    _no_duplicates(f"the claims of study {study!r}", own)
    return claims + own


# --- resolution in a study ---------------------------------------------------------------


def _members(where: str, names: Sequence[str], study: StudyOutline) -> tuple[str, ...]:
    """Method keys of ``names``: a method of the study is itself, a sweep group its members
    in the study's order."""
    out: list[str] = []
    for name in names:
        group = [m for m in study.methods if study.groups.get(m, m) == name]
        if name in study.methods or name in study.ensembles:
            out.append(name)
        elif group:
            out.extend(group)
        else:
            groups = sorted({study.groups.get(m, m) for m in study.methods} - set(study.methods))
            _fail(
                where,
                f"method {name!r} is not in study {study.name!r}; its methods: "
                f"{', '.join(study.methods)}"
                + (f"; its groups: {', '.join(groups)}" if groups else "")
                + (f"; its ensembles: {', '.join(study.ensembles)}" if study.ensembles else ""),
            )
    return tuple(dict.fromkeys(out))


def _check_calibrators(where: str, quantity: Quantity, study: StudyOutline) -> None:
    for key in quantity.calibrator_keys:
        pooled_after = study.ensembles and key.endswith(CALIBRATE_THEN_POOL_SUFFIX)
        if key.removesuffix(CALIBRATE_THEN_POOL_SUFFIX if pooled_after else "") not in (
            study.calibrators
        ):
            _fail(
                where,
                f"calibrator {key!r} is not evaluated in study {study.name!r}; its calibrators: "
                f"{', '.join([UNCALIBRATED, *study.calibrators])}",
            )


def _renamed(side: Mapping[str, Any] | None, rename: Mapping[str, str]) -> dict[str, Any] | None:
    if side is None:
        return None
    q = side["quantity"]
    quantity = replace(
        q,
        calibrator=rename.get(q.calibrator, q.calibrator),
        temperature=rename.get(q.temperature, q.temperature) if q.temperature else None,
    )
    return {"methods": tuple(rename.get(m, m) for m in side["methods"]), "quantity": quantity}


def _pairs(
    where: str, a: tuple[str, ...], b: tuple[str | None, ...]
) -> list[tuple[str, str | None, str]]:
    """(a method, b method, id suffix) of each comparison: a list on one side is compared
    member by member with the other side's method; lists on both sides pair in order."""
    if len(a) > 1 and len(b) > 1:
        if len(a) != len(b):
            _fail(
                where, f"lists on both sides pair in order and need equal lengths, got {a} and {b}"
            )
        return [(x, y, x if len(set(a)) == len(a) else f"{x},{y}") for x, y in zip(a, b)]
    if len(a) > 1:
        return [(x, b[0], x) for x in a]
    return [(a[0], y, y if len(b) > 1 else "") for y in b]


def _expand(spec: Mapping[str, Any], study: StudyOutline) -> list[Claim]:
    """The concrete claims of one parsed entry: one per listed member (lists on both sides
    pair in order), except the ordered members of a trend over members."""
    where = f"claim {spec['paper']}:{spec['id']}"
    a_methods = _members(f"{where} side a", spec["a"]["methods"], study)
    b_methods = _members(f"{where} side b", spec["b"]["methods"], study) if spec["b"] else (None,)
    for side in filter(None, (spec["a"], spec["b"])):
        _check_calibrators(where, side["quantity"], study)
    names = ("paper", "source", "quote", "expect", "threshold", "tolerance", "over", "test")
    fields = {k: spec[k] for k in (*names, "datasets", "note")}
    b_quantity = spec["b"]["quantity"] if spec["b"] else None
    if spec["over"] == "members":
        if len(a_methods) < 2 or len(b_methods) != 1:
            _fail(
                where,
                "a trend over members needs >= 2 methods on side a and one on side b, "
                f"got {a_methods}",
            )
        b = Side(b_methods[0], b_quantity) if spec["b"] else None
        return [Claim(id=spec["id"], a=Side(a_methods, spec["a"]["quantity"]), b=b, **fields)]
    return [
        Claim(
            id=spec["id"] + (f"[{suffix}]" if suffix else ""),
            a=Side(a_method, spec["a"]["quantity"]),
            b=Side(b_method, b_quantity) if spec["b"] else None,
            **fields,
        )
        for a_method, b_method, suffix in _pairs(where, a_methods, b_methods)
    ]


def _chosen(
    specs: Sequence[Mapping[str, Any]],
    rename: Mapping[str, str] | None,
    only: Sequence[str] | None,
) -> list[dict[str, Any]]:
    """The specs ``only`` keeps (all without it), their names mapped by ``rename``."""
    rename = dict(rename or {})
    wanted = set(only or [])
    chosen = [
        s
        for s in specs
        if not wanted or s["id"] in wanted or any(w.startswith(s["id"] + "[") for w in wanted)
    ]
    return [{**s, "a": _renamed(s["a"], rename), "b": _renamed(s["b"], rename)} for s in chosen]


def resolve_claims(
    specs: Sequence[Mapping[str, Any]],
    study: StudyOutline,
    *,
    rename: Mapping[str, str] | None = None,
    only: Sequence[str] | None = None,
) -> list[Claim]:
    """The concrete claims of ``specs`` in ``study``.

    Args:
        specs: parsed claims (:func:`gather`).
        study: the study's methods, groups and calibrator keys.
        rename: method or calibrator names of the claims -> the study's names (e.g. a
            study fitting ``ts`` where the paper's study fits ``ts_grid_mukhoti``).
        only: keep only these claim ids (a paper's id, or an expanded ``id[member]``).

    Raises:
        ValueError: a method, group or calibrator the study does not have (lists what it
            has), or an id of ``only`` that matches no claim.
    """
    wanted = set(only or [])
    claims = [c for s in _chosen(specs, rename, only) for c in _expand(s, study)]
    if wanted:
        claims = [c for c in claims if c.id in wanted or c.id.split("[")[0] in wanted]
        unmatched = sorted(wanted - {c.id for c in claims} - {c.id.split("[")[0] for c in claims})
        if unmatched:
            raise ValueError(
                f"only: no claim with id(s) {unmatched}; ids: "
                + (", ".join(c.id for c in claims) or "none")
            )
    return claims


def study_claims(study: StudyOutline, options: Mapping[str, Any]) -> list[Claim]:
    """The concrete claims of a ``claims`` report's options in ``study``: the papers'
    claims (filtered by ``only``, names mapped by ``rename``), then the study's own.

    Raises:
        ValueError: nothing to check, or what :func:`gather` / :func:`resolve_claims` refuse.
    """
    papers = gather(options.get("papers"), None)
    own = gather(None, options.get("claims"), study.name)
    if not papers and not own:
        raise ValueError("no claims to check: give papers and / or claims")
    resolved = resolve_claims(papers, study, rename=options.get("rename"), only=options.get("only"))
    return resolved + resolve_claims(own, study)


def option_sides(options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every side (A and B) of the claims a ``claims`` report's options check: the papers'
    claims kept by ``only``, names mapped by ``rename``, then the study's own."""
    papers = _chosen(
        gather(options.get("papers"), None), options.get("rename"), options.get("only")
    )
    own = gather(None, options.get("claims"))
    return [side for s in [*papers, *own] for side in (s["a"], s["b"]) if side is not None]


def claim_calibrators(options: Mapping[str, Any]) -> list[str]:
    """The calibrator keys the claims of a ``claims`` report's options read (after
    ``only`` and ``rename``): the report's ``calibrators`` declaration, so a study fits the
    calibrators its claims compare."""
    return [
        # an ensemble's calibrate-then-pool rows read its members' own calibrator
        key.removesuffix(CALIBRATE_THEN_POOL_SUFFIX)
        for side in option_sides(options)
        for key in side["quantity"].calibrator_keys
    ]


def check_study_claims(study: StudyOutline, options: Mapping[str, Any] | None = None) -> None:
    """Validate the options of a study's ``claims`` report against the study itself.

    The pipelines call this when they are built (the report's ``study_check``), so a claim
    naming a method, group or calibrator the study lacks (or an unknown metric, paper or
    id) fails before any node runs.

    Raises:
        ValueError: naming the report and what is wrong.
    """
    try:
        study_claims(study, dict(options or {}))
    except ValueError as error:
        raise ValueError(f"report 'claims': {error}") from None

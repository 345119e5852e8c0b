"""One rule from per-unit numbers to a verdict, the same for every notebook.

A claim is declared once, as data, next to its experiment (:class:`Declaration`): the
paper's own words and where they stand, what one independent unit is (a seed, a trial, a
task, an arrival order, a timing repeat) and the number measured on each, the comparison
(``paired`` against a baseline on the same units, against a ``threshold``, or a
deterministic ``check``), the direction the claim points, the **smallest effect that
counts**, the budget below which the claim cannot be decided and the family of claims
tried together. A run turns its per-unit numbers into evidence with :func:`judge`;
:func:`decide` then gives every claim of the run its verdict, the family's p-values
corrected together (Holm). ``lab.runs.claims.summary`` calls it; ``python -m lab claims
verify`` calls it again on a run's ``metrics.json`` alone and compares.

The rule, on the per-unit differences ``d`` oriented so that the claim's direction is
positive (``paired``: claimed minus baseline, minus the declared margin if any;
``threshold``: the number minus the threshold; ``direction="less"`` flips the sign). A
claim of "at least as good" or "close to" is a paired or threshold claim against a declared
margin (non-inferiority: "HyperTrick's best minus random search's is above -5"):

- **effect** = mean of ``d``; its **95% interval** a percentile bootstrap of the mean
  (``scipy.stats.bootstrap``, 9,999 resamples, a fixed generator: the same numbers give
  the same interval on every machine);
- **p** = a one-sided sign-flip permutation test that the mean of ``d`` is above 0
  (``scipy.stats.permutation_test``; exact for up to 13 units), Holm-corrected within the
  family; **p_against** the same test that the mean is below the smallest
  effect that counts (``minimum_effect - d`` above 0), corrected the same way;
- **holds**: the corrected p is at most 0.05 *and* the interval's low end is above 0, and
  the effect reaches the smallest effect that counts; **smaller than claimed**: no effect
  is excluded the same way, but the effect falls short of the smallest effect;
  **does not hold**: the corrected p_against is at most 0.05 *and* the interval's high end
  is below the smallest effect that counts (the data rule the claimed effect out, as
  firmly as "holds" needs them to rule out no effect); **inconclusive**: anything else, with the
  number of units that would decide it at the observed spread (80% power for the smallest
  effect, one-sided t-test at the family's corrected level; at least as many as the
  sign-flip test needs to reach that level at all); one unit is always inconclusive;
- a ``check`` holds when every unit is on the claimed side of its threshold, else it does
  not hold (no statistics: the number is deterministic, e.g. an error against 1e-6);
- **too small to decide here**: the run's budget is below the declared ``decidable_at``
  (the verdict measured stays in ``measured_verdict``); **not tested**: no numbers.

Both conditions guard each side: with few units a percentile bootstrap interval is too
narrow (three seeds all ahead give an interval above 0, while a sign-flip test of three
can never go below p = 1/8; two identical units give an interval of zero width), so the
exact test is the one that can refuse. Neither "holds" nor "does not hold" can come from
fewer than five units, and a family of k needs more (2^-n <= 0.05 / k).
"""

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

HOLDS, SMALLER, INCONCLUSIVE = "holds", "smaller than claimed", "inconclusive"
FAILS, TOO_SMALL, UNTESTED = "does not hold", "too small to decide here", "not tested"
VERDICTS = (HOLDS, SMALLER, INCONCLUSIVE, FAILS, TOO_SMALL, UNTESTED)

PAIRED, THRESHOLD, CHECK = "paired", "threshold", "check"
COMPARISONS = (PAIRED, THRESHOLD, CHECK)
GREATER, LESS = "greater", "less"

ALPHA = 0.05  # one-sided, per family after Holm's correction
CONFIDENCE = 0.95
RESAMPLES = 9_999
SEED = 0  # the bootstrap's and the permutation test's generator: verdicts recompute exactly
POWER = 0.8  # for the units that would decide an inconclusive claim
# What `python -m lab new` writes where only the researcher can say what the paper says (the
# quote, its source, why the smallest effect): a claim may be declared and run with it, and
# `lab claims verify` refuses the run until it is replaced (:func:`unfilled`).
PLACEHOLDER = "FILL IN"
FILLED = ("quote", "source", "minimum_effect_source", "paper_value")


@dataclass(frozen=True)
class Declaration:
    """One claim of a paper, declared before the runs that decide it."""

    name: str  # stable across presets and devices: one claim, one name
    statement: str  # what is tested here, one sentence (our words)
    quote: str  # the paper's own words, verbatim
    source: str  # where they stand: "Sec. 4.2, Fig. 3" (and the paper, if the study has several)
    unit: str  # what n counts: "seed", "trial", "task", "arrival order", "repeat"
    measure: str  # the number per unit with its units, e.g. "steps saved to -200 (MPO - search)"
    comparison: str  # "paired" (values are [claimed, baseline] pairs), "threshold" or "check"
    direction: str = GREATER  # the claim says the measure is greater ("less": smaller)
    minimum_effect: float = 0.0  # in the measure's units, in the claim's direction, >= 0
    minimum_effect_source: str = ""  # "the paper reports ..." or "stated: ..." (why this value)
    threshold: float | None = None  # what each unit is compared with; paired: a margin on
    # the difference (0 when None): "at least as good within 5" is paired, threshold -5
    family: str = ""  # claims of one run tried together, corrected together; "" = alone
    decidable_at: int | None = None  # the smallest budget at which the claim can be decided
    budget_unit: str = ""  # what the budget counts ("environment steps")
    declared_after: str = ""  # "" if declared before any run; else the run that preceded it
    timing: bool = False  # a wall-clock measure: repeats, compilation outside, run alone
    paper_value: str = ""  # the paper's own number for this claim, with where it stands and
    # its precision ("13.7x at 64 P100 GPUs (Abstract)"), shown beside ours; "" where the
    # paper's text (as read here) gives none. Not part of the criterion.

    def __post_init__(self):
        if self.comparison not in COMPARISONS:
            raise ValueError(f"claim {self.name!r}: comparison {self.comparison!r} is not "
                             f"one of {', '.join(COMPARISONS)}")
        if self.direction not in (GREATER, LESS):
            raise ValueError(f"claim {self.name!r}: direction {self.direction!r} is not "
                             f"'greater' or 'less'")
        if not self.minimum_effect >= 0:
            raise ValueError(f"claim {self.name!r}: minimum_effect {self.minimum_effect} is "
                             "negative; give it in the claim's direction")
        if not (self.quote.strip() and self.source.strip()):
            raise ValueError(f"claim {self.name!r}: declare the paper's words (quote) and "
                             "where they stand (source)")


# the fields that make the criterion: a change to any of them is a new criterion
CRITERION = ("name", "unit", "measure", "comparison", "direction", "minimum_effect",
             "threshold", "family", "decidable_at", "budget_unit", "timing")


def fingerprint(entry: dict[str, Any]) -> str:
    """12 hex digits of the criterion's fields (``CRITERION``) of a declaration or entry."""
    if isinstance(entry, Declaration):
        entry = asdict(entry)
    text = json.dumps({k: entry.get(k) for k in CRITERION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def judge(declaration: Declaration, values: Sequence[float] | None,
          baseline: Sequence[float] | None = None, *, threshold: float | None = None,
          budget: int | None = None, numbers: dict[str, Any] | None = None,
          to_remake: str = "") -> dict[str, Any]:
    """A claim's evidence as ``metrics.json`` records it, before :func:`decide` gives it a
    verdict: the declaration, the per-unit ``values`` (paired: with the ``baseline`` of the
    same units, recorded as pairs), the ``threshold`` (the declaration's unless given
    here), the run's ``budget``, a few ``numbers`` to show beside it (label -> number or
    short text) and, where the run could not measure the claim, why (``to_remake``;
    ``values`` None). The units must be independent (seeds, trials, tasks)."""
    d = declaration
    threshold = d.threshold if threshold is None else threshold
    if values is None:
        pairs = None
    elif d.comparison == PAIRED:
        if baseline is None or len(baseline) != len(values):
            raise ValueError(f"claim {d.name!r}: a paired claim needs a baseline for each of "
                             f"its {len(values)} units")
        pairs = [[_num(a), _num(b)] for a, b in zip(values, baseline, strict=True)]
    else:
        if threshold is None:
            raise ValueError(f"claim {d.name!r}: a {d.comparison} needs a threshold")
        pairs = [_num(v) for v in values]
    entry = asdict(d) | {"threshold": None if threshold is None else float(threshold),
                         "values": pairs, "budget": budget, "to_remake": to_remake,
                         "numbers": [[str(k), v] for k, v in (numbers or {}).items()]}
    return entry | {"declaration": fingerprint(entry)}


def _num(x) -> float:
    if isinstance(x, bool | np.bool_):
        return float(x)
    return float(x)


def differences(entry: dict[str, Any]) -> np.ndarray:
    """The per-unit differences, oriented so that the claim's direction is positive."""
    values = entry.get("values") or []
    if entry["comparison"] == PAIRED:
        d = np.array([a - b for a, b in values], float) - float(entry.get("threshold") or 0)
    else:
        d = np.array(values, float) - float(entry["threshold"])
    return d if entry.get("direction", GREATER) == GREATER else -d


def interval(d: np.ndarray) -> list[float] | None:
    """The percentile bootstrap 95% interval of the mean of ``d`` (None below two units)."""
    from scipy import stats

    if d.size < 2:
        return None
    if np.ptp(d) == 0:
        return [float(d[0]), float(d[0])]
    res = stats.bootstrap((d,), np.mean, n_resamples=RESAMPLES, confidence_level=CONFIDENCE,
                          method="percentile", rng=np.random.default_rng(SEED))
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]


def sign_flip_p(d: np.ndarray) -> float | None:
    """One-sided p that the mean of ``d`` is above 0, by flipping the units' signs (exact
    for up to 13 units); None below two units."""
    from scipy import stats

    if d.size < 2:
        return None
    res = stats.permutation_test((d,), np.mean, permutation_type="samples",
                                 alternative="greater", n_resamples=RESAMPLES,
                                 rng=np.random.default_rng(SEED))
    return float(res.pvalue)


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down correction of a family's p-values: the i-th smallest of m times
    m - i + 1, made non-decreasing in that order, at most 1. (statsmodels' ``multipletests``
    gives the same numbers, but runs ``gc.collect()`` on every call: seconds in a process
    that holds a JAX run; tests/test_verdict.py checks the two agree.)"""
    p = np.asarray(p, float)
    if p.size == 0:
        return []
    order = np.argsort(p, kind="stable")
    scaled = np.maximum.accumulate(p[order] * np.arange(p.size, 0, -1))
    out = np.empty_like(p)
    out[order] = np.minimum(scaled, 1.0)
    return [float(x) for x in out]


def units_to_decide(d: np.ndarray, minimum_effect: float, family_size: int) -> int | None:
    """About how many units would decide an inconclusive claim at the observed spread: 80%
    power for the smallest effect that counts (the observed effect where that is 0) in a
    one-sided one-sample t-test at the family's corrected level, and at least as many as
    the sign-flip test needs to reach that level at all. None without a spread."""
    from statsmodels.stats.power import TTestPower

    level = ALPHA / max(family_size, 1)
    target = minimum_effect if minimum_effect > 0 else abs(float(d.mean()))
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    least = math.ceil(math.log2(1 / level))  # 2^-n <= level
    if target == 0 or sd == 0:
        return None
    # the t-test's power at every n up to 10,000 (statsmodels' root finder fails on large
    # effects over small spreads; the first n that reaches the power is the answer)
    sizes = np.arange(2, 10_001)
    power = TTestPower().power(effect_size=target / sd, nobs=sizes, alpha=level,
                               alternative="larger")
    enough = np.flatnonzero(power >= POWER)
    return max(least, int(sizes[enough[0]])) if enough.size else None


def _verdict(entry: dict[str, Any], d: np.ndarray, p: float | None) -> str:
    if entry.get("values") is None or d.size == 0:
        return UNTESTED
    if entry["comparison"] == CHECK:
        return HOLDS if bool(np.all(d >= 0)) else FAILS
    if d.size < 2:
        return INCONCLUSIVE
    low, high = entry["ci"]
    if p is not None and p <= ALPHA and low > 0:
        return HOLDS if entry["effect"] >= entry["minimum_effect"] else SMALLER
    against = entry.get("p_against")
    if against is not None and against <= ALPHA and high < entry["minimum_effect"]:
        return FAILS
    return INCONCLUSIVE


def decide(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every claim of one run with its verdict and evidence: ``n``, ``effect``, ``ci``,
    ``p_raw`` and ``p`` (Holm within the family), ``p_against_raw`` and ``p_against``,
    ``verdict``, ``measured_verdict`` (before the budget rule) and, for an inconclusive
    claim, ``units_to_decide``."""
    out = [dict(e) for e in entries]
    diffs = [differences(e) for e in out]
    for e, d in zip(out, diffs, strict=True):
        stat = e["comparison"] != CHECK and d.size >= 2
        e |= {"n": int(d.size), "effect": float(d.mean()) if d.size else None,
              "ci": interval(d) if stat else None,
              "p_raw": sign_flip_p(d) if stat else None, "p": None,
              "p_against_raw": sign_flip_p(e["minimum_effect"] - d) if stat else None,
              "p_against": None}
    families: dict[str, list[int]] = {}
    for i, e in enumerate(out):
        if e["p_raw"] is not None:
            families.setdefault(e.get("family") or f"\0{e['name']}", []).append(i)
    for members in families.values():
        for key in ("p", "p_against"):
            corrected = holm([out[i][f"{key}_raw"] for i in members])
            for i, p in zip(members, corrected, strict=True):
                out[i][key] = p
        for i in members:
            out[i]["family_size"] = len(members)
    for e, d in zip(out, diffs, strict=True):
        measured = _verdict(e, d, e["p"])
        e["measured_verdict"] = measured
        e["units_to_decide"] = (units_to_decide(d, e["minimum_effect"], e.get("family_size", 1))
                                if measured == INCONCLUSIVE and d.size >= 2 else None)
        small = (e.get("decidable_at") is not None and e.get("budget") is not None
                 and e["budget"] < e["decidable_at"] and measured != UNTESTED)
        e["verdict"] = TOO_SMALL if small else measured
    return out


# what decide() computes: `lab claims verify` recomputes these and compares
COMPUTED = ("n", "effect", "ci", "p_raw", "p", "p_against_raw", "p_against", "measured_verdict",
            "verdict", "units_to_decide")
DECLARED = tuple(f.name for f in fields(Declaration))
OPTIONAL = ("paper_value",)  # declared fields that runs recorded before them lack


def mismatches(recorded: list[dict[str, Any]]) -> list[str]:
    """What differs between a run's recorded claims and the rule applied again to their
    recorded declarations and numbers alone; each a line naming the claim and the field."""
    problems = []
    inputs = []
    for e in recorded:
        missing = [k for k in (*DECLARED, "values", "declaration")
                   if k not in e and k not in OPTIONAL]
        if "declaration" not in e:
            problems.append(f"{e.get('name', '?')}: recorded before the shared verdict rule (no "
                            "declaration, no per-unit values); re-derive or re-run it")
            continue
        if missing:
            problems.append(f"{e['name']}: no {', '.join(missing)} recorded")
            continue
        if fingerprint(e) != e["declaration"]:
            problems.append(f"{e['name']}: declaration fingerprint {e['declaration']} does not "
                            f"match its recorded criterion ({fingerprint(e)})")
        inputs.append({k: v for k, v in e.items() if k not in COMPUTED})
    again = {e["name"]: e for e in decide(inputs)}
    for e in recorded:
        if e.get("name") not in again:
            continue
        new = again[e["name"]]
        for k in COMPUTED:
            if not _same(e.get(k), new.get(k)):
                problems.append(f"{e['name']}: {k} recorded {e.get(k)!r}, recomputed "
                                f"{new.get(k)!r}")
    return problems


def unfilled(recorded: list[dict[str, Any]]) -> list[str]:
    """A line for each recorded claim whose paper's words (``FILLED``) still hold the
    placeholder that ``python -m lab new`` writes: no verdict stands on an unquoted claim."""
    out = []
    for e in recorded:
        empty = [k for k in FILLED if PLACEHOLDER in str(e.get(k) or "")]
        if empty:
            out.append(f"{e.get('name', '?')}: {', '.join(empty)} still {PLACEHOLDER}: write the "
                       "paper's own words in the claim's Declaration (its experiment module's "
                       "CLAIMS) and run it again")
    return out


def _same(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b

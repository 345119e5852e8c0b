"""What a run says about its paper: the claims with their verdicts, and the headline metrics.

A notebook measures a paper's claims; its reports should open with them. Each experiment
module declares its claims once, as data (``lab.runs.verdict.Declaration``: the paper's
words, the per-unit measure, the comparison, the smallest effect that counts, the family);
a run judges them from its per-unit numbers and records them next to its other metrics:

    record(**metrics, **summary(
        paper="Frerix et al., Proximal Backpropagation (ICLR 2018)",
        measured="digits, MLP 400-100-400, 30 epochs, 3 seeds",
        paper_setting="CIFAR-10, MLP and conv nets",
        claims=[judge(CLAIMS["faster_per_epoch_exact"], proxprop_gain, backprop_gain)],
        headline=["proxprop_final_train_loss", "backprop_final_train_loss"]))

``summary`` decides every claim with the one rule (``lab.runs.verdict.decide``: effect,
bootstrap interval, sign-flip p corrected within the family) and returns three reserved
entries of ``metrics.json``:

- ``study``: the paper, the data and scale this run measured at, the paper's own setting;
- ``claims``: one entry per claim: its declaration and fingerprint, the per-unit values,
  the verdict (one of ``VERDICTS``) with its evidence (``n``, ``effect``, ``ci``, ``p``)
  and a few numbers to show beside it, as label -> number (or short text);
- ``headline``: names of scalar metrics of this run worth a glance.

The run report (``report.html``), the index and the claims dashboard (``claims.html``) read
these entries; ``python -m lab claims verify`` recomputes the verdicts from them alone.
"""

from typing import Any

from lab.runs.verdict import (
    CHECK,
    FAILS,
    GREATER,
    HOLDS,
    INCONCLUSIVE,
    LESS,
    PAIRED,
    SMALLER,
    THRESHOLD,
    TOO_SMALL,
    UNTESTED,
    VERDICTS,
    Declaration,
    decide,
    judge,
)

WEAKLY = "weakly"  # retired: read from runs recorded before the shared rule, never written
RESERVED = ("study", "claims", "headline", "headline_labels")
__all__ = ["CHECK", "GREATER", "LESS", "PAIRED", "THRESHOLD", "FAILS", "HOLDS", "INCONCLUSIVE",
           "SMALLER", "TOO_SMALL", "UNTESTED", "VERDICTS", "Declaration", "judge", "summary",
           "claims_of", "headline_of", "study_of", "fmt", "plural", "declarations", "said"]


def declarations(*claims: Declaration) -> dict[str, Declaration]:
    """An experiment's claims by name (each name once): ``CLAIMS = declarations(...)``."""
    names = [c.name for c in claims]
    if len(set(names)) != len(names):
        raise ValueError(f"claim names repeat: {names}; give each claim its own name")
    return {c.name: c for c in claims}


def summary(*, paper: str, measured: str, paper_setting: str = "",
            claims: list[dict[str, Any]] = (), headline: list[str] = (),
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The reserved entries of ``metrics.json`` for ``record(**summary(...))``; see the
    module docstring. ``claims`` are ``judge(...)``'s entries; each gets its verdict here,
    the family's p-values corrected together. ``labels``: what the reports call a headline
    metric, with its unit (``"test accuracy, method"``); by default its name, spaced."""
    names = [c["name"] for c in claims]
    if len(set(names)) != len(names):
        raise ValueError(f"claim names repeat: {names}; give each claim its own name")
    # judge() keeps the numbers as [label, value] pairs: metrics.json is written with sorted
    # keys, and the order of the numbers is part of how they read ("ProxProp 0.29; ...")
    return {"study": {"paper": paper, "measured": measured, "paper_setting": paper_setting},
            "claims": decide(list(claims)), "headline": list(headline),
            "headline_labels": {k: v for k, v in (labels or {}).items() if k in headline}}


def plural(n: int, word: str) -> str:
    """``3 seeds``, ``1 seed``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# --- reading them back (the reports) ---------------------------------------------------------

def is_scalar(value: Any) -> bool:
    return isinstance(value, int | float | str | bool) or value is None


EVIDENCE = ("quote", "source", "unit", "measure", "comparison", "direction", "minimum_effect",
            "minimum_effect_source", "threshold", "family", "family_size", "decidable_at",
            "budget", "budget_unit", "declared_after", "timing", "declaration", "values", "n",
            "effect", "ci", "p", "p_raw", "measured_verdict", "units_to_decide", "to_remake",
            "paper_value")


def claims_of(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The declared claims of a run's metrics, each with a verdict the reports know and its
    evidence (``EVIDENCE``; absent from runs recorded before the shared rule, whose retired
    "weakly" is read as it was written); a run without claims has none."""
    out = []
    for claim in metrics.get("claims") or []:
        if not isinstance(claim, dict) or "statement" not in claim:
            continue
        numbers = claim.get("numbers") or []
        pairs = numbers.items() if isinstance(numbers, dict) else numbers
        numbers = {str(k): v for k, v in pairs if is_scalar(v)}
        verdict = claim.get("verdict")
        out.append({"name": claim.get("name", ""), "statement": claim["statement"],
                    "verdict": verdict if verdict in (*VERDICTS, WEAKLY) else UNTESTED,
                    "numbers": numbers} | {k: claim.get(k) for k in EVIDENCE})
    return out


def headline_of(metrics: dict[str, Any]) -> dict[str, Any]:
    """The declared headline metrics that are scalars, name -> value (arrays never)."""
    names = metrics.get("headline") or []
    return {n: metrics[n] for n in names if n in metrics and is_scalar(metrics[n])}


def label_of(metrics: dict[str, Any], name: str) -> str:
    """What the reports call headline metric ``name``: its declared label, else its name
    with spaces for underscores (the name itself is the label's tooltip)."""
    labels = metrics.get("headline_labels")
    return (labels.get(name) if isinstance(labels, dict) else None) or name.replace("_", " ")


def study_of(metrics: dict[str, Any]) -> dict[str, str]:
    study = metrics.get("study")
    return study if isinstance(study, dict) else {}


def fmt(value: Any) -> str:
    """A number as a report shows it: 4 significant digits, integers whole."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _check(claim: dict[str, Any]) -> tuple[str, str]:
    """A check's side of its threshold and its first six values (and how many more)."""
    values = claim["values"]
    more = f" and {len(values) - 6} more" if len(values) > 6 else ""
    return ("<=" if claim.get("direction") == LESS else ">=",
            ", ".join(fmt(v) for v in values[:6]) + more)


def evidence(claim: dict[str, Any]) -> str:
    """One line of a claim's evidence as the pages show it beside the verdict:

        effect +19.53 [15.85, 23.19] (95% CI), n = 3 sampler seeds, p = 0.125 (Holm, 1 of
        1); smallest effect that counts 0; about 5 units would decide it

    A deterministic check shows its units against the threshold; a claim the run could not
    measure says what would re-make it; a claim recorded before the shared rule says so."""
    if claim.get("declaration") is None:
        return "recorded before the shared verdict rule: no per-unit evidence"
    if claim.get("values") is None:
        return "not measured" + (": the record lacks the per-unit numbers"
                                 if claim.get("to_remake") else "")
    unit = claim.get("unit") or "unit"
    n = claim.get("n") or 0
    if claim.get("comparison") == "check":
        side, shown = _check(claim)
        return (f"deterministic check, n = {n}: {shown} (each must be {side} "
                f"{fmt(claim.get('threshold'))}); no interval")
    effect, ci = claim.get("effect"), claim.get("ci")
    beyond = claim.get("threshold") or 0
    over = (f" over the {'margin' if claim.get('comparison') == 'paired' else 'threshold'} "
            f"{fmt(beyond)}" if beyond else "")
    text = f"effect{over} {effect:+.4g}" if effect is not None else "effect -"
    text += f" [{ci[0]:.4g}, {ci[1]:.4g}] (95% CI)" if ci else " (no interval: one unit)"
    text += f", n = {n} (unit: {unit})"
    if claim.get("p") is not None:
        size = claim.get("family_size") or 1
        text += f", p = {claim['p']:.3g}" + (f" (Holm, family of {size})" if size > 1 else "")
    text += f"; smallest effect that counts {fmt(claim.get('minimum_effect'))}"
    if claim.get("units_to_decide"):
        text += f"; about {claim['units_to_decide']} units would decide it at this spread"
    if claim.get("measured_verdict") not in (None, claim.get("verdict")):
        text += (f"; measured {claim['measured_verdict']} below the smallest budget "
                 f"({fmt(claim.get('budget'))} of {fmt(claim.get('decidable_at'))} "
                 f"{claim.get('budget_unit') or ''})").rstrip()
    return text


def criterion(claim: dict[str, Any]) -> str:
    """The claim's declared criterion in one line: unit, measure, comparison, direction,
    threshold or margin and the smallest effect, with where that comes from."""
    if claim.get("declaration") is None:
        return ""
    what = {"paired": "paired against the baseline on the same units",
            "threshold": "against a threshold", "check": "deterministic check"}
    line = (f"per {claim.get('unit')}: {claim.get('measure')}; "
            f"{what.get(claim.get('comparison'), claim.get('comparison'))}, "
            f"{claim.get('direction')}")
    if claim.get("threshold") is not None:
        line += f" than {fmt(claim['threshold'])}"
    line += f"; smallest effect {fmt(claim.get('minimum_effect'))}"
    if claim.get("minimum_effect_source"):
        line += f" ({claim['minimum_effect_source']})"
    if claim.get("family"):
        line += f"; family {claim['family']}"
    return line + f"; declaration {claim['declaration']}"


def said(claim: dict[str, Any], spec: str = "+.3g") -> str:
    """A judged claim's verdict with its evidence in one phrase, for a notebook's sentences
    (``spec`` formats the effect and its interval):

        inconclusive (effect +0.31 [+0.2, +0.4], p = 0.25, n = 3; about 6 units would
        decide it)

    A claim below its smallest budget says what it measured and what would decide it; a
    check, its units; a claim the run could not measure, what would re-make it."""
    text = claim["verdict"]
    if claim.get("verdict") == TOO_SMALL and claim.get("measured_verdict"):
        text += (f" (measured: {claim['measured_verdict']}; deciding it needs "
                 f"{fmt(claim.get('decidable_at'))} {claim.get('budget_unit') or ''}, this "
                 f"run had {fmt(claim.get('budget'))})")
        return text  # the evidence is on the claims page; what it would take is said here
    if claim.get("values") is None:
        return text + (f" ({claim['to_remake']})" if claim.get("to_remake") else "")
    n, effect, ci = claim.get("n") or 0, claim.get("effect"), claim.get("ci")
    if claim.get("comparison") == CHECK:
        side, shown = _check(claim)
        return text + f" (a check, each {side} {fmt(claim.get('threshold'))}: {shown})"
    if ci is None:
        if effect is None:
            return text
        return text + f" (effect {effect:{spec}} on one unit: one unit never decides)"
    text += (f" (effect {effect:{spec}} [{ci[0]:{spec}}, {ci[1]:{spec}}], "
             f"p = {claim['p']:.3g}, n = {n}")
    if claim.get("units_to_decide"):
        text += f"; about {claim['units_to_decide']} units would decide it"
    return text + ")"


def verdict_lines(claims: list[dict[str, Any]], *, numbers: bool = False) -> str:
    """A run's judged claims as Markdown for a notebook's conclusions, one line each:
    ``- `name`: **verdict**: evidence`` (:func:`evidence`), with the claim's numbers when
    ``numbers``; every figure from the claims themselves."""
    lines = []
    for c in claims:
        line = f"- `{c['name']}`: **{c['verdict']}**: {evidence(c)}"
        if c.get("to_remake"):
            line += f" ({c['to_remake']})"
        shown = [f"{k} {fmt(v)}" for k, v in (c.get("numbers") or []) if v is not None]
        lines.append(line + (" (" + "; ".join(shown) + ")" if numbers and shown else ""))
    return "\n".join(lines) if lines else "No claim was tested."

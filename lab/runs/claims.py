"""What a run says about its paper: the claims with their verdicts, and the headline metrics.

A notebook measures a paper's claims; its reports should open with them. Instead of the
reports guessing from metric names, the notebook declares them, next to its other metrics:

    record(**metrics, **summary(
        paper="Frerix et al., Proximal Backpropagation (ICLR 2018)",
        measured="digits, MLP 400-100-400, 30 epochs, 3 seeds",
        paper_setting="CIFAR-10, MLP and conv nets",
        claims=[Claim("faster_per_epoch", "ProxProp lowers the training loss faster ...",
                      verdict_of(metrics["claim_faster_per_epoch"]),
                      {"BackProp loss after epoch 5": 0.41, "ProxProp": 0.29})],
        headline=["proxprop_final_train_loss", "backprop_final_train_loss"]))

``summary`` returns three reserved entries of ``metrics.json``:

- ``study``: the paper, the data and scale this run measured at, the paper's own setting;
- ``claims``: one entry per claim: its name, statement, verdict (one of ``VERDICTS``) and
  the few numbers behind the verdict, as label -> number (or short text). A notebook may
  declare, before the run, the smallest budget at which a claim can be decided; below it
  ``decidable`` turns the measured verdict into "too small to decide here";
- ``headline``: names of scalar metrics of this run worth a glance.

The run report (``report.html``), the index and the claims dashboard (``claims.html``) read
these entries; curves and other arrays stay in ``metrics.json`` and the figures.
"""

from dataclasses import asdict, dataclass, field, replace
from typing import Any

HOLDS, WEAKLY, FAILS, UNTESTED = "holds", "weakly", "does not hold", "not tested"
TOO_SMALL = "too small to decide here"  # the run's budget is below what the claim needs
VERDICTS = (HOLDS, WEAKLY, FAILS, TOO_SMALL, UNTESTED)
RESERVED = ("study", "claims", "headline")


@dataclass(frozen=True)
class Claim:
    """One claim of a paper as a run measured it."""

    name: str  # short and stable: it names the claim across runs, e.g. "faster_per_epoch"
    statement: str  # what the paper claims, in one sentence
    verdict: str  # one of VERDICTS
    numbers: dict[str, Any] = field(default_factory=dict)  # the figures behind the verdict

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.name!r}: verdict {self.verdict!r} is not one of "
                             f"{', '.join(VERDICTS)}")


def verdict_of(held: bool | None, *, weakly: bool = False) -> str:
    """``held`` as a verdict: None is "not tested"; a claim that held only by a margin the
    notebook calls weak (inside the spread between seeds, on the mean but not every seed)
    is "weakly"."""
    if held is None:
        return UNTESTED
    if not held:
        return FAILS
    return WEAKLY if weakly else HOLDS


def decidable(claim: Claim, *, budget: int, smallest: int | None, unit: str) -> Claim:
    """``claim`` as a run of ``budget`` can state it, given the ``smallest`` budget at which
    the notebook declared, before the run, that the claim can be decided (None: no such
    declaration; the claim unchanged).

    Below that budget the verdict is "too small to decide here", whatever was measured: a
    run that has not got as far as the claim needs says nothing for or against it (the
    usual case is a CPU default run that "does not hold" only because it is short). The
    measured verdict stays in the numbers, beside the two budgets. A claim the run did not
    test keeps "not tested", and every claim at or above the budget keeps its verdict:

        decidable(Claim("solves", "...", FAILS), budget=3_000, smallest=11_000,
                  unit="environment steps")
        -> Claim("solves", "...", TOO_SMALL, {"measured verdict": "does not hold",
                 "smallest budget to decide": "11,000 environment steps",
                 "this run's budget": "3,000 environment steps"})
    """
    if smallest is None or budget >= smallest or claim.verdict == UNTESTED:
        return claim
    return replace(claim, verdict=TOO_SMALL, numbers=claim.numbers | {
        "measured verdict": claim.verdict,
        "smallest budget to decide": f"{smallest:,} {unit}",
        "this run's budget": f"{budget:,} {unit}"})


def summary(*, paper: str, measured: str, paper_setting: str = "",
            claims: list[Claim] = (), headline: list[str] = ()) -> dict[str, Any]:
    """The reserved entries of ``metrics.json`` for ``record(**summary(...))``; see the
    module docstring."""
    names = [c.name for c in claims]
    if len(set(names)) != len(names):
        raise ValueError(f"claim names repeat: {names}; give each claim its own name")
    # numbers as [label, value] pairs: metrics.json is written with sorted keys, and the
    # order of the numbers is part of how they read ("ProxProp 0.29; BackProp 0.41")
    return {"study": {"paper": paper, "measured": measured, "paper_setting": paper_setting},
            "claims": [asdict(c) | {"numbers": [[k, v] for k, v in c.numbers.items()]}
                       for c in claims],
            "headline": list(headline)}


def plural(n: int, word: str) -> str:
    """``3 seeds``, ``1 seed``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# --- reading them back (the reports) ---------------------------------------------------------

def is_scalar(value: Any) -> bool:
    return isinstance(value, int | float | str | bool) or value is None


def claims_of(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The declared claims of a run's metrics, each with a verdict the reports know; a run
    without them (an older run, a notebook without a paper) has none."""
    out = []
    for claim in metrics.get("claims") or []:
        if not isinstance(claim, dict) or "statement" not in claim:
            continue
        numbers = claim.get("numbers") or []
        pairs = numbers.items() if isinstance(numbers, dict) else numbers
        numbers = {str(k): v for k, v in pairs if is_scalar(v)}
        out.append({"name": claim.get("name", ""), "statement": claim["statement"],
                    "verdict": claim.get("verdict") if claim.get("verdict") in VERDICTS
                    else UNTESTED, "numbers": numbers})
    return out


def headline_of(metrics: dict[str, Any]) -> dict[str, Any]:
    """The declared headline metrics that are scalars, name -> value (arrays never)."""
    names = metrics.get("headline") or []
    return {n: metrics[n] for n in names if n in metrics and is_scalar(metrics[n])}


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

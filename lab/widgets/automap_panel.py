"""The automatic partitioner's panel: run a search and watch its best layout improve.

    panel = automap_panel(params, stack_results)   # the notebook's parameters and searches
    panel.show()

Run searches the controls' stack (``layers`` blocks at ``batch`` x ``length``) with the
chosen searcher, compile budget and seed (``lab.parallel.search``). After each compile
the figure shows the best score so far over Megatron's (1: Megatron; below 1: better than
Megatron by the objective) and, for each block, which of its four decisions agree with
Megatron's. Stop ends the search at the next compile. ``panel.result`` holds the search's
``Result``; ``panel.result.layout.table()`` is the layout as readable ``PartitionSpec``s.
Given the notebook's searches it opens on its greedy search of the same stack.
"""

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from lab.experiments import automap as experiment
from lab.parallel import search
from lab.widgets.controls import Control, Controls
from lab.widgets.panel import Panel

CONTROLS = (
    Control("layers", int, 1, 8, description="blocks"),
    Control("searcher", str, options=experiment.SEARCHERS),
    Control("budget", int, 1, 5000, description="compiles"),
    Control("seed", int, 0, 99),
    Control("batch", int, 1, 4096),
    Control("length", int, 1, 4096),
)


def draw(figure: Figure, data: dict[str, Any]) -> None:
    ax_score, ax_layout = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    ax_score.plot(range(1, len(data["best"]) + 1), data["best"], color="C0")
    ax_score.axhline(1.0, color="k", ls=":", label="Megatron")
    ax_score.set(xlabel="compiles", ylabel="best score / Megatron's", title=data["title"])
    ax_score.legend(fontsize=7)
    agree = np.asarray(data["agree"], float).reshape(-1, 4)
    ax_layout.imshow(agree, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax_layout.set(xticks=range(4), xticklabels=["qkv", "out", "mlp_in", "mlp_out"],
                  yticks=range(len(agree)), ylabel="block", title="best layout = Megatron's?")
    figure.tight_layout()


def automap_panel(params: dict[str, Any], stacks: list[dict[str, Any]] | None = None
                  ) -> Panel:
    """A panel over the notebook's ``params`` (``configure``'s keyword arguments); it opens
    on the notebook's search (``experiment.stacks``) with the controls' blocks and searcher,
    if there is one."""
    setup = experiment.configure(**params)
    values = {"layers": setup.stack_layers[0], "searcher": "greedy", "budget": setup.budget,
              "seed": setup.seed, "batch": setup.batch, "length": setup.length}
    controls = Controls(CONTROLS, values)

    def setup_of(values):
        return experiment.configure(**(params | {"batch": values["batch"],
                                                 "length": values["length"]}))

    def run(values, report):
        setup = setup_of(values)
        p = experiment.problem(setup, values["layers"])
        megatron = p.named()["Megatron"]
        reference = setup.objective(p.scorer(p.space.layout(megatron)))
        best: list[float] = []
        title = f"{values['searcher']}, {values['layers']} blocks"

        def on_price(compiles, score, choice):
            best.append(score / reference)
            agree = [a == b for a, b in zip(choice, megatron, strict=True)]
            return report(compiles / values["budget"], {"best": best, "agree": agree,
                                                        "title": title})

        searcher, options = experiment.searcher_options(values["searcher"], setup)
        return search.search(p.space, p.scorer, setup.objective, searcher, values["budget"],
                             values["seed"], on_price=on_price, **options)

    panel = Panel("Automatic partitioning, live", controls, run, draw, validate=setup_of,
                  figsize=(9.0, 3.2), labels=("compiles", "best score / Megatron's"))
    stack = next((s for s in stacks or () if s["layers"] == values["layers"]), None)
    found = next((r for r in stack["runs"] if r["searcher"] == values["searcher"]), None) \
        if stack is not None else None
    if found is not None:
        megatron = stack["problem"].named()["Megatron"]
        panel.set_result({"best": found["best_over_megatron"],
                          "agree": [a == b for a, b in zip(found["choice"], megatron,
                                                           strict=True)],
                          "title": f"{values['searcher']}, {values['layers']} blocks: the "
                                   "notebook's"})
    return panel

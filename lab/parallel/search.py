"""Searchers over a partitioning ``Space`` (``lab.parallel.automap``), scored by compiling.

``search(space, scorer, objective, searcher, budget, seed)`` runs one of:

- ``"exhaustive"``: every layout (refused above ``limit`` layouts, before any compile);
- ``"greedy"``: coordinate descent from ``start`` (full replication by default): each
  decision in turn takes its best option with the others fixed, sweeps repeat until one
  changes nothing. Over the budget, a layout that needs fewer bytes counts as better, so a
  start that does not fit walks towards the budget. It only ever moves to a strictly better
  layout, so it never returns one costlier than its start;
- ``"random"``: layouts drawn uniformly;
- ``"mcts"``: Monte Carlo tree search over the sequence of per-decision choices (automap's
  search, in outline). A node is a partial choice (the first k decisions made); each
  iteration descends by UCT (mean reward plus ``exploration * sqrt(ln N / n)``), adds one
  untried child, completes the rest of the choice at random (``completion="random"``) or
  replicated (``"default"``), compiles it and backs the reward up the path. The reward is
  normalised against full replication: ``score(replicated) / score(layout)`` without the
  budget in the numerator, 1 for a layout as good as replication, 0 for one over budget.

A search's ``budget`` counts the distinct layouts it prices (its compiles, were it alone);
a scorer shared by several searches compiles each layout once, which only saves time. The
``Result`` holds the best layout, its cost, the compiles used and the history of the best
score after each one, from which ``Result.first(predicate)`` reads the compiles a search
needed until its best layout first satisfied ``predicate`` (Megatron in every layer).
A one-line ValueError for an unknown searcher (before any compile) and, after the search,
when no layout priced fits the budget: it names the smallest per-device bytes found.
"""

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from lab.parallel.automap import Cost, Layout, MiB, Objective, Scorer, Space, choices

SEARCHERS = ("exhaustive", "greedy", "random", "mcts")
COMPLETIONS = ("random", "default")


@dataclasses.dataclass
class Result:
    """A search's best layout and what it took to find it."""

    searcher: str
    choice: tuple[int, ...]
    layout: Layout
    cost: Cost
    score: float
    compiles: int  # distinct layouts this search priced
    history: list[tuple[float, tuple[int, ...]]]  # after each: best score and its choice
    scored: dict[tuple[int, ...], float]  # every layout priced and its score

    def first(self, predicate: Callable[[tuple[int, ...]], bool]) -> int | None:
        """Compiles until the best choice so far first satisfied ``predicate``; None if
        it never did."""
        for used, (_, choice) in enumerate(self.history, start=1):
            if predicate(choice):
                return used
        return None


class _Run:
    """One search's bookkeeping: its distinct evaluations and best-so-far history."""

    def __init__(self, space: Space, scorer: Scorer, objective, budget: int,
                 on_price: Callable | None = None):
        self.space, self.scorer, self.objective, self.budget = space, scorer, objective, budget
        self.on_price = on_price
        self.scored: dict[tuple[int, ...], float] = {}
        self.history: list[tuple[float, tuple[int, ...]]] = []

    @property
    def exhausted(self) -> bool:
        return len(self.scored) >= self.budget

    def cost(self, choice: tuple[int, ...]) -> Cost:
        return self.scorer(self.space.layout(choice))

    def score(self, choice: Sequence[int]) -> float:
        choice = tuple(int(c) for c in choice)
        if choice not in self.scored:
            self.scored[choice] = self.objective(self.cost(choice))
            best = self.history[-1] if self.history else (math.inf, choice)
            self.history.append(min(best, (self.scored[choice], choice), key=lambda b: b[0]))
            if self.on_price is not None and self.on_price(len(self.scored), *self.history[-1]) \
                    is False:
                raise _Stopped
        return self.scored[choice]


class _Stopped(Exception):
    """``on_price`` asked the search to stop."""


def exhaustive(run: _Run, rng: np.random.Generator) -> None:
    for choice in choices(run.space):
        run.score(choice)


def greedy(run: _Run, rng: np.random.Generator, start: Sequence[int] | None = None) -> None:
    current = tuple(run.space.replicated if start is None else start)
    best = _rank(run, current)
    changed = True
    while changed and not run.exhausted:
        changed = False
        for k, options in enumerate(run.space.sizes):
            for option in range(options):
                if option == current[k] or run.exhausted:
                    continue
                candidate = current[:k] + (option,) + current[k + 1:]
                rank = _rank(run, candidate)
                if rank < best:
                    best, current, changed = rank, candidate, True


def _rank(run: _Run, choice: tuple[int, ...]) -> tuple[float, int]:
    """Greedy's order: feasible layouts by score, then layouts over the budget by their
    bytes, so that a descent starting over the budget walks towards it."""
    score = run.score(choice)
    return (score, 0) if math.isfinite(score) else (math.inf, run.cost(choice).memory)


def random(run: _Run, rng: np.random.Generator) -> None:
    for _ in range(50 * run.budget):
        if run.exhausted or len(run.scored) == run.space.size:
            return
        run.score(tuple(rng.integers(n) for n in run.space.sizes))


@dataclasses.dataclass
class _Node:
    visits: int = 0
    best: float = 0.0  # the best reward found below this node
    done: bool = False  # every layout below it priced
    children: dict[int, "_Node"] = dataclasses.field(default_factory=dict)


def mcts(run: _Run, rng: np.random.Generator, exploration: float = 0.5,
         completion: str = "random") -> None:
    sizes = run.space.sizes
    run.score(run.space.replicated)  # the reference, priced within the budget like any other
    baseline = run.objective.unbudgeted(run.cost(run.space.replicated))
    root = _Node()
    for _ in range(50 * run.budget):
        if run.exhausted or len(run.scored) == run.space.size:
            return
        node, prefix, path = root, [], [root]
        while len(prefix) < len(sizes):
            untried = [o for o in range(sizes[len(prefix)]) if o not in node.children]
            if untried:
                option = int(rng.choice(untried))
                node.children[option] = _Node()
                prefix.append(option)
                path.append(node.children[option])
                break
            parent = node
            open_ = [o for o, child in parent.children.items() if not child.done]
            option = max(open_, key=lambda o: _uct(parent, parent.children[o], root.best,
                                                   exploration))
            node = parent.children[option]
            prefix.append(option)
            path.append(node)
        score = run.score(_complete(run, prefix, rng, completion))
        reward = 0.0 if math.isinf(score) else baseline / score
        path[-1].done = len(prefix) == len(sizes)
        for depth in range(len(path) - 1, -1, -1):
            visited = path[depth]
            visited.visits += 1
            visited.best = max(visited.best, reward)
            if depth < len(path) - 1 and len(visited.children) == sizes[depth]:
                visited.done = all(child.done for child in visited.children.values())
        if root.done:
            return


def _complete(run: _Run, prefix: list[int], rng: np.random.Generator,
              completion: str) -> tuple[int, ...]:
    """``prefix`` completed replicated (``"default"``) or at random, redrawn a few times
    while the draw has been priced already, so that each iteration tends to learn something
    new."""
    sizes = run.space.sizes[len(prefix):]
    if completion == "default":
        return tuple(prefix) + (0,) * len(sizes)
    for _ in range(10):
        choice = tuple(prefix) + tuple(int(rng.integers(n)) for n in sizes)
        if choice not in run.scored:
            break
    return choice


def _uct(parent: _Node, child: _Node, best: float, exploration: float) -> float:
    """The child's best reward as a fraction of the best found anywhere, plus the
    exploration bonus."""
    return (child.best / best
            + exploration * math.sqrt(math.log(parent.visits) / child.visits))


_SEARCHERS = {"exhaustive": exhaustive, "greedy": greedy, "random": random, "mcts": mcts}


def search(space: Space, scorer: Scorer, objective=None, searcher: str = "mcts",
           budget: int = 64, seed: int = 0, limit: int = 5000,
           on_price: Callable[[int, float, tuple[int, ...]], bool | None] | None = None,
           **options) -> Result:
    """The best layout ``searcher`` finds in ``space`` within ``budget`` distinct compiles
    (``exhaustive``: all of them). ``options``: ``start`` for greedy, ``exploration`` and
    ``completion`` for mcts. ``on_price(compiles, best score, best choice)`` is called after
    each new layout is priced; returning False ends the search there."""
    if searcher not in _SEARCHERS:
        raise ValueError(f"unknown searcher {searcher!r}; choose one of {', '.join(SEARCHERS)}")
    if options.get("completion", "random") not in COMPLETIONS:
        raise ValueError(f"unknown completion {options['completion']!r}; choose one of "
                         f"{', '.join(COMPLETIONS)}")
    if searcher == "exhaustive":
        if space.size > limit:
            raise ValueError(f"exhaustive search over {space.size} layouts is above the limit "
                             f"of {limit}; use greedy, random or mcts, or tie more leaves")
        budget = space.size
    if budget < 1:
        raise ValueError(f"budget must be at least 1 compile, got {budget}")
    run = _Run(space, scorer, objective or Objective(), budget, on_price)
    try:
        _SEARCHERS[searcher](run, np.random.default_rng(seed), **options)
    except _Stopped:
        pass
    score, choice = run.history[-1]
    if math.isinf(score):
        smallest = min(run.cost(c).memory for c in run.scored)
        raise ValueError(f"no layout fits the budget of {run.objective.budget / MiB:.2f} MiB "
                         f"per device: the smallest of the {len(run.scored)} priced needs "
                         f"{smallest / MiB:.2f} MiB ({smallest} bytes); raise the budget or "
                         "use more devices")
    return Result(searcher, choice, space.layout(choice), run.cost(choice), score,
                  len(run.scored), run.history, dict(run.scored))

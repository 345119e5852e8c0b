"""Notebook 00's parameters as a training configuration, checked before a kernel starts."""

from typing import Any

from lab.data import DATASETS
from lab.runs.claims import plural
from lab.runs.claims import summary as claims_summary
from lab.train import ClassifierConfig


def configure(*, dataset: str, epochs: int, batch_size: int, lr: float, width: int,
              depth: int, seed: int) -> ClassifierConfig:
    """The quickstart's :class:`ClassifierConfig`; raises ValueError naming a bad parameter.
    The runner calls it with every parameter before it starts a kernel (the notebook's
    metadata names it), so ``-p epochs -3`` or ``-p dataset mnistt`` costs nothing."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    return ClassifierConfig(epochs=epochs, batch_size=batch_size, lr=lr, width=width,
                            depth=depth, seed=seed)


def summary(dataset: str, config: ClassifierConfig) -> dict[str, Any]:
    """The study and headline for ``record`` (``lab.runs.claims``): no paper, no
    claims; the reports show the test accuracy first."""
    return claims_summary(
        paper="", claims=[], measured=(f"{dataset}, MLP {config.depth}x{config.width}, "
                                       f"{plural(config.epochs, 'epoch')} of Adam {config.lr:g}"),
        headline=["test_accuracy", "best_test_accuracy", "train_loss", "test_loss"])

"""Training loops: whole loops inside one jit."""

from lab.train.supervised import (
    ClassifierConfig,
    History,
    Metrics,
    cross_entropy,
    evaluate,
    make_fit,
    minibatches,
    train_classifier,
)

__all__ = [
    "ClassifierConfig",
    "History",
    "Metrics",
    "cross_entropy",
    "evaluate",
    "make_fit",
    "minibatches",
    "train_classifier",
]

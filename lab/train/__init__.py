"""Training loops: whole loops inside one jit."""

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it, imported on first use
    "ClassifierConfig": ".supervised",
    "History": ".supervised",
    "Metrics": ".supervised",
    "cross_entropy": ".supervised",
    "evaluate": ".supervised",
    "make_fit": ".supervised",
    "minibatches": ".supervised",
    "train_classifier": ".supervised",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)

"""The networks shipped with probsched, in plain JAX with seeded weights.

Each model is a function returning ``(fn, example_args)``: ``fn`` takes float32 numpy or JAX
arrays, ``example_args`` is a tuple of inputs of the right shape.

>>> import probsched as ps
>>> sorted(ps.models.NAMES)
['bert_base', 'bert_tiny', 'mobilenet_tiny', 'mobilenet_v2', 'resnet50', 'resnet_tiny']
>>> fn, args = ps.models.get("resnet_tiny")
>>> [a.shape for a in args]
[(1, 32, 32, 3)]
"""

from __future__ import annotations

from typing import Callable, Dict, Tuple

from .bert import bert, bert_base, bert_tiny
from .mobilenet import mobilenet, mobilenet_tiny, mobilenet_v2
from .resnet import resnet, resnet50, resnet_tiny

#: Model constructors by name (the command line's ``probsched tune-model NAME``).
NAMES: Dict[str, Callable[[], Tuple[Callable, tuple]]] = {
    "resnet50": resnet50,
    "mobilenet_v2": mobilenet_v2,
    "bert_base": bert_base,
    "resnet_tiny": resnet_tiny,
    "mobilenet_tiny": mobilenet_tiny,
    "bert_tiny": bert_tiny,
}
ALIASES = {"resnet-50": "resnet50", "mobilenet-v2": "mobilenet_v2", "mobilenetv2": "mobilenet_v2", "bert": "bert_base", "bert-base": "bert_base"}


def get(name: str) -> Tuple[Callable, tuple]:
    """``(fn, example_args)`` of a shipped model by name."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in NAMES:
        raise KeyError(f"unknown model {name!r}; shipped models: {', '.join(sorted(NAMES))}")
    return NAMES[key]()


__all__ = ["get", "NAMES", "resnet", "resnet50", "resnet_tiny", "mobilenet", "mobilenet_v2", "mobilenet_tiny", "bert", "bert_base", "bert_tiny"]

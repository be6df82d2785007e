"""Trained cost models kept on disk, by a hash of everything the training depends on.

Every tuning run of a workload with the default ``mlp-transfer`` model first trains the MLP
on the shipped records of the other workloads alone: the same inputs, the same seed, so the
same predictor, seconds of training each time. :func:`key` hashes the model's
configuration, the versions of JAX and optax and the training data; :func:`store` keeps the
trained arrays under ``models/`` of the disk cache (:mod:`probsched.cache`) and :func:`load`
returns them to the next run. ``probsched cache clear`` empties it.

>>> import numpy as np, os, tempfile
>>> os.environ["PROBSCHED_CACHE_DIR"] = tempfile.mkdtemp()
>>> k = key({"seed": 0}, [np.ones((2, 3), np.float32)], [1.0], ["g"])
>>> load(k) is None
True
>>> store(k, {"w0": np.arange(3.0)})
>>> load(k)["w0"].tolist(), k == key({"seed": 0}, [np.ones((2, 3), np.float32)], [2.0], ["g"])
([0.0, 1.0, 2.0], False)
>>> del os.environ["PROBSCHED_CACHE_DIR"]
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Dict, Hashable, Optional, Sequence

import numpy as np

from .. import cache

#: Bumped when the training itself changes (loss, batching, initialisation): older entries
#: are then never read again.
FORMAT = 1


def key(config: dict, features: Sequence[np.ndarray], times: Sequence[float], groups: Sequence[Hashable]) -> str:
    """Hex digest of a training's inputs: configuration, library versions, data."""
    import jax
    import optax

    h = hashlib.sha256()
    h.update(json.dumps({"format": FORMAT, "config": config, "jax": jax.__version__, "optax": optax.__version__}, sort_keys=True).encode())
    for x in features:
        a = np.ascontiguousarray(x, dtype=np.float32)
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    h.update(np.asarray(times, dtype=np.float64).tobytes())
    h.update("\0".join(str(g) for g in groups).encode())
    return h.hexdigest()[:32]


def _path(digest: str) -> str:
    return os.path.join(cache.folder("models"), f"mlp-{digest}.npz")


def load(digest: str) -> Optional[Dict[str, np.ndarray]]:
    """The arrays stored under ``digest``, or None (missing or unreadable: train instead)."""
    try:
        with np.load(_path(digest), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError):
        return None


def store(digest: str, arrays: Dict[str, np.ndarray]) -> None:
    """Keep ``arrays`` under ``digest`` (atomically; a failure to write is not an error)."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    try:
        cache.write_atomic(_path(digest), buf.getvalue())
    except OSError:
        pass

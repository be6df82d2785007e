"""The ``probsched`` subcommands that tune and report, one module each.

- :mod:`.tune` — ``probsched tune``: search with a progress bar, then best vs numpy/jax.jit;
- :mod:`.show` — ``probsched show``: the best schedules as Python (instruction log), loop nest, source;
- :mod:`.bench` — ``probsched bench``: tune a list of suite workloads, Markdown and JSON;
- :mod:`.plot` — ``probsched plot``: best-so-far curves per strategy from a database;
- :mod:`.vary` — ``probsched vary``: the best schedule timed beside variants with decisions changed;
- :mod:`.tune_model` — ``probsched tune-model``: every task of a network under one budget, then vs jax.jit;
- :mod:`.model_import` — ``probsched import``: a JAX model's fused tasks as a table;
- :mod:`.common` — workload specs, opening databases, :class:`~.common.CLIError` (exit 2).

Each command module has ``add_parser(subparsers)`` and ``run(args) -> exit code``.
"""

from . import bench, model_import, plot, show, tune, tune_model, vary

#: In the order ``probsched --help`` lists them.
COMMANDS = (tune, tune_model, show, bench, plot, vary, model_import)

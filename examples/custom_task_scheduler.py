"""A new task scheduler in one short file: spend each round where the most time is.

``next_task`` sees every task's state (weight, FLOPs, trials, best time, best after each
round, alive) and returns the index of the task that gets the next round. This one gives
every task a first round, then always picks the task that takes the largest share of the
network's latency (weight x best time), preferring tasks with fewer trials among those
within 10% of the largest. Run it:

    python examples/custom_task_scheduler.py bert_tiny 24
"""

import sys

import probsched as ps


class LargestShareFirst:
    name = "largest-share"

    def next_task(self, tasks, rng):
        live = [t for t in tasks if t.alive]
        if not live:
            return None
        fresh = [t for t in live if t.trials == 0]
        if fresh:
            return fresh[0].index
        top = max(t.weighted_seconds for t in live)
        near = [t for t in live if t.weighted_seconds >= 0.9 * top]
        return min(near, key=lambda t: t.trials).index


if __name__ == "__main__":
    name, trials = (sys.argv[1:] + ["bert_tiny", "24"])[:2]
    fn, args = ps.models.get(name)
    result = ps.tune_model(fn, *args, trials=int(trials), scheduler=LargestShareFirst())
    print(result.summary())

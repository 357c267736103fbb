"""The collectives lab: what each collective does, what it costs, and a model of that cost.

- :mod:`~trainscope.collectives.semantics`: the six collectives on textbook examples
  (before/after per rank, checked) and the identities reduce + broadcast = all_reduce and
  reduce_scatter + all_gather = all_reduce.
- :mod:`~trainscope.collectives.bandwidth`: time, algbw, busbw (nccl-tests' factors) and a
  wrong-element count per op and message size.

Both run inside an initialised process group (every rank calls the same functions).
"""

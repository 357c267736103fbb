"""``trainscope estimate-memory``: per-device training memory, predicted before a run.

For a model (a named architecture, a workload config, or a parameter count and shape) and
a way of training it (world size, precision, optimizer, micro-batch, sequence length,
activation checkpointing) the estimate gives the bytes one device holds under DDP, ZeRO-1,
ZeRO-2 and ZeRO-3/FSDP, by component: weights, gradients, optimizer states (and the fp32
master copy of mixed precision), saved activations, and stated allowances for
communication buffers and temporaries. ``--measure`` runs a few steps of the same
configuration and puts the memory meter's counts (:mod:`trainscope.profiling.memory`)
beside the estimate.

Modules, in the order data flows:

- :mod:`.archs`: shapes and exact parameter counts (no torch);
- :mod:`.states`: model states per precision, optimizer and sharding (no torch);
- :mod:`.activations`: saved-activation bytes per architecture and checkpointing policy,
  written per op from what the modules here save (no torch);
- :mod:`.buffers`: the allowances, each stated (no torch);
- :mod:`.core`: puts them together into an :class:`~.core.Estimate` (no torch);
- :mod:`.workload`: a workload config -> an architecture and exact counts (builds the model);
- :mod:`.measure`: ``--measure`` (trains a few steps);
- :mod:`.render` and :mod:`.cli`: the table, the JSON and the subcommand.

Nothing here imports torch at import time; only :mod:`.workload` and :mod:`.measure` do,
inside the functions that build or train a model. So a 1.5B GPT-2 is estimated instantly.
"""

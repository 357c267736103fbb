"""trainscope inside the user's framework, in its own conventions: a Lightning profiler
and callback (:mod:`trainscope.integrations.lightning`), a Hugging Face
``TrainerCallback`` (:mod:`trainscope.integrations.hf`). Each writes the record
``trainscope profile`` writes; each needs its framework installed (the ``lightning`` and
``hf`` extras), imported only when its module is."""

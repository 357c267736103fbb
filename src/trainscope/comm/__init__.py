"""Communication, modelled and recorded (torch-free): the α–β cost model fitted to
measured collectives (``cost_model``), what each strategy sends per step (``predict``),
and the collectives study's record (``record``). Measuring lives in ``collectives``;
tables of these figures live in ``reports``."""

"""Starting processes: torchrun for ``--nproc N`` or a fresh process for a study's run
(``launcher``), and the torchrun process itself (``agent``)."""

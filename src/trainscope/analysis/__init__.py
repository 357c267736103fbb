"""trainscope.analysis: what a run record says, computed from its files (torch-free).

Stateless functions over run directories and summaries: the timeline and the trace of
a run's steps and ranks (``timeline``, ``trace``), the CPU's share and load (``cpu``),
physical bounds on a measurement (``bounds``), medians and spreads of repeated runs
(``stats``) and where memory went (``memory``). The doctor (:mod:`trainscope.diagnosis`)
and the reports (:mod:`trainscope.reports`) read them; they render with
:mod:`trainscope.render`.
"""

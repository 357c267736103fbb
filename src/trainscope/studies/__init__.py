"""Studies: a named list of run configurations x repeats, executed into a study directory.

Each study module has a ``plan(base_config, device, **options) -> StudyPlan``;
:func:`trainscope.studies.base.execute` runs a plan (resumably), and
``trainscope.reports.study_report`` turns the study directory into a report.
"""

STUDY_KINDS = ("loader", "profile", "precision", "strategies", "checkpointing")

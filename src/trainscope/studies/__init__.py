"""Studies: a named list of run configurations x repeats, executed into a study directory.

Each study module has a ``plan(base_config, device, **options) -> StudyPlan`` and is one
entry of :data:`trainscope.registry.STUDIES` (with its flags, report builder and the run
settings it varies); :func:`trainscope.studies.base.execute` runs a plan (resumably), and
``trainscope.reports.study_report`` turns the study directory into a report.
"""

"""The user's own training code, measured as it is: ``trainscope profile`` and
``trainscope.profile()`` (see :mod:`trainscope.script.profile`)."""

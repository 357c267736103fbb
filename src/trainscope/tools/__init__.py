"""Commands that work on a finished run's checkpoint: ``quantize`` (INT8 Linear layers)
and ``sample`` (text from a GPT checkpoint)."""

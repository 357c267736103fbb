"""Torch-free helpers every layer may use: number formatting (``numfmt``), medians and
their spread (``spread``), text made safe for terminals and documents (``textsafe``),
bounded YAML (``safe_yaml``) and value checks for settings (``checks``)."""

"""trainscope: a workbench for making PyTorch training fast and lean, and for showing why.

Importing the package must stay cheap: nothing here imports torch (``trainscope --help``
and the report commands run without it).
"""

__version__ = "0.1.0"

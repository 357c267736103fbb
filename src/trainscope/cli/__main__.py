"""``python -m trainscope.cli``: the same as the ``trainscope`` command."""

from trainscope.cli.commands import main

raise SystemExit(main())

"""Runs the attempts of trainscope runs in forked children of this one process.

The resume tests kill runs with SIGKILL at many points; a fresh interpreter per attempt
would spend most of the test importing torch. This process imports everything first and
runs no torch operation itself (so no thread pool exists to be broken by ``fork``); each
attempt is a forked child that runs ``trainscope run ...`` as the CLI would, with its own
``TRAINSCOPE_FAULT``, and may die by it. Usage::

    python fault_driver.py '[{"argv": ["run", ...], "fault": "step=5"}, ...]'

prints the children's exit codes (negative: killed by that signal) as a JSON list. An
entry ``{"flip": PATH}`` instead flips one bit of the file PATH (a damaged checkpoint)
and reports 0.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    attempts = json.loads(sys.argv[1])
    import torch._dynamo  # noqa: F401  (imported lazily by torch.optim: once, here)

    import trainscope.train.run  # noqa: F401
    from trainscope.cli import main as cli

    codes = []
    for attempt in attempts:
        if "flip" in attempt:
            with open(attempt["flip"], "r+b") as f:
                f.seek(-3, os.SEEK_END)
                byte = f.read(1)[0]
                f.seek(-3, os.SEEK_END)
                f.write(bytes([byte ^ 0x40]))
            codes.append(0)
            continue
        pid = os.fork()
        if pid == 0:
            os.environ.pop("TRAINSCOPE_FAULT", None)
            if attempt.get("fault"):
                os.environ["TRAINSCOPE_FAULT"] = attempt["fault"]
            code = 1
            try:
                code = cli(attempt["argv"])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    print(json.dumps(codes))
    return 0


if __name__ == "__main__":
    sys.exit(main())

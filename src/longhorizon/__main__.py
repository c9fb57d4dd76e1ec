"""``longhorizon`` and ``python -m longhorizon``: the command line, with Ctrl-C ending cleanly at any moment.

Outside a run's safe region, SIGINT ends the process at once with exit code 130 and one line: there
is nothing in flight worth saving (all files are written atomically), and a ``KeyboardInterrupt``
raised at an arbitrary point is unreliable here: inside JAX's garbage-collection callback it is
swallowed and the command carries on; inside XLA's compilation the interpreter can tear down under
XLA's own threads and abort ("pure virtual method called", exit 134). While a run is active, its
:class:`~longhorizon.runner.interrupts.StopRequest` takes over: the first Ctrl-C stops at the next
chunk boundary and saves. ``os._exit`` leaves without interpreter teardown for the same reason.
"""

from __future__ import annotations

import os
import signal
import sys

from longhorizon.runner.interrupts import INTERRUPTED_EXIT, NOT_SAVED


def _exit_at_once(signum, frame) -> None:
    print(f"\n{NOT_SAVED}", file=sys.stderr, flush=True)
    os._exit(INTERRUPTED_EXIT)


def main() -> None:
    signal.signal(signal.SIGINT, _exit_at_once)  # first, so that even the imports below end cleanly
    from longhorizon.cli import main as cli_main

    code = cli_main()
    if code == INTERRUPTED_EXIT:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    main()

"""Run a module with every Python thread under cProfile.

``python -m benchmarks.profile_threads OUT -m MODULE [ARGS...]`` runs ``MODULE`` as
``__main__`` and writes one pstats file, ``OUT``, when the process exits: the main thread's
profile plus that of each thread that ended before it. ``python -m cProfile`` sees only the
main thread, and the scheduler's work is on its emitter and ingest threads.
"""

from __future__ import annotations

import atexit
import cProfile
import pstats
import runpy
import sys
import threading
from typing import Any


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        sys.exit(f"usage: {sys.argv[0]} OUT -m MODULE [ARGS...]")
    out, module = sys.argv[1], sys.argv[3]
    sys.argv = [module, *sys.argv[4:]]
    ended: list[cProfile.Profile] = []
    lock = threading.Lock()
    original = threading.Thread.run

    def run(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        profile = cProfile.Profile()
        profile.enable()
        try:
            original(self, *args, **kwargs)
        finally:
            profile.disable()
            with lock:
                ended.append(profile)

    threading.Thread.run = run  # type: ignore[method-assign]
    main_profile = cProfile.Profile()

    def write() -> None:
        main_profile.disable()
        stats = pstats.Stats(main_profile)
        with lock:
            for profile in ended:
                stats.add(profile)
        stats.dump_stats(out)

    atexit.register(write)
    main_profile.enable()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""The loop scripts/mutate.py, mutate_c.py and mutate_hot.py share: the baseline run, one run per
mutant, the verdicts counted and printed, and the original file put back whatever happens (finally,
and on Ctrl-C or SIGTERM). Each mutator supplies how a run is made and how its lines are labelled."""
from __future__ import annotations

import signal
import sys
from typing import Callable


def _interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def summary(counts: dict[str, int]) -> str:
    """The counts in the caller's order; a timeout is a kill, shown beside the killed."""
    parts = []
    for key, n in counts.items():
        if key == "killed":
            parts.append(f"killed {n} (+{counts.get('timeout', 0)} by timeout)")
        elif key != "timeout":
            parts.append(f"{key.replace('no-tests', 'no tests')} {n}")
    return ", ".join(parts)


def drive(tool: str, rel: str, numbered: list, *,
          baseline: Callable[[], tuple[str, float, str] | None],
          trial: Callable[[object], tuple[str, str] | None],
          restore: Callable[[], None],
          counts: tuple[str, ...] = ("killed", "timeout", "survived", "no-tests", "invalid"),
          label: str = "[{n}/{total}]", tag: str = "", note: str = "",
          interrupted: str = "original restored") -> int:
    """Run the mutants ``numbered`` (pairs ``(number, Mutant)``) of the file ``rel``; 0, or 2 when
    the baseline fails, or 130 when interrupted.

    ``baseline()`` runs the original: ``(status, seconds, what)``, ``what`` naming the run in the
    failure message, or None after reporting a failure of its own. ``trial(m)`` runs one mutant and
    puts the file back: ``(status, timing)``, or None when the mutant was not run (it does not
    compile: counted as ``invalid``). ``restore()`` runs last, error or not. ``label`` and ``tag``
    are the line prefixes of a verdict and of a survivor (``n``: 1-based position, ``i``: number).
    """
    signal.signal(signal.SIGTERM, _interrupt)
    tally = dict.fromkeys(counts, 0)
    survivors = []
    try:
        base = baseline()
        if base is None:
            return 2
        status, dt, what = base
        if status != "survived":
            print(f"{tool}: the baseline run does not pass ({status})" + (f": {what}" if what else ""),
                  file=sys.stderr)
            return 2
        print(f"baseline passed in {dt:.1f}s; {len(numbered)} mutants of {rel}{note}", flush=True)
        for n, (i, m) in enumerate(numbered):
            verdict = trial(m)
            if verdict is None:
                tally["invalid"] += 1
                continue
            status, timing = verdict
            tally[status] += 1
            prefix = label.format(n=n + 1, total=len(numbered), i=i)
            print(f"{prefix} {rel}:{m.line}: [{m.kind}] {m.describe()}  "
                  f"{'SURVIVED' if status == 'survived' else status} ({timing})", flush=True)
            if status == "survived":
                survivors.append((i, m))
    except KeyboardInterrupt:
        print(f"\n{tool}: interrupted; {interrupted}", file=sys.stderr)
        return 130
    finally:
        restore()
    print(f"\n{rel}: {len(numbered)} mutants, {summary(tally)}")
    for i, m in survivors:
        print(f"{tag.format(i=i)}{rel}:{m.line}: {m.describe()}")
    return 0

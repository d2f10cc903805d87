"""The payload screen's cost on a whole guarded upsert: payload_fields = "credentials" and "all"
against "text_field" (the payload's other fields stored as given), in one process, one run.

Run: python bench/payload_screen_ab.py [--rounds 15] [--points 256] [--lines 2] [--noised] [--profile ARM]

One bed (bench/_harness.py) holds PII collections that differ only in ``payload_fields`` (owner hr,
``raw_in_boundary = true``, ``noise_on_write = true``, text field ``text``); alice@hr upserts into
each, storing raw vectors (``--noised``: ``raw_in_boundary = false``, so every vector is noised and
receipted too, a costlier upsert to compare the screen with). Every round builds a new batch of
``--points`` seeded points (384-d) whose payloads a document store would hold: a text field of two
or three sentences (an e-mail in one point of four), a title, a summary of ``--lines`` sentences
one a line (2: about 100 characters), a source and a status that repeat, an author object (an
e-mail in one of three), a tag list, a nested ``meta`` object (page, language, timestamp, revision,
a Windows path with backslashes in one of four, a quoted remark in one of five), a float score and
an integer count. Each string that is not a repeated category is new in every round, so the
screen's clean-values memory holds none of them (a store's new documents); keys and categories are
remembered, as in use.

Arms, each a collection of its own (its own clean-values memory):

  text_field   payload_fields = "text_field": the text field screened, the rest stored as given
  credentials  payload_fields = "credentials" (the default)
  all          payload_fields = "all"
  no-reread    "credentials" timed with ``field_screen.stored_findings`` answering []: the screen
               without review 54's JSON-escaped re-reading (not a safe screen, only what that
               re-reading costs)
  unshared     "credentials" timed with ``field_screen._SHARED_READ_MIN`` out of reach: every
               reading by ``detect.find_sensitive``, as before ``detect.one_value_reader``
  old-escapes  "credentials" timed with detect.py's escape handling as before h-dbmail
               (tests/detect_escapes_old.py): each escape looked up by the regex, the map back
               from the decoded view built whether or not it holds a finding

Each arm gets its own copy of the round's batch and is timed on one guarded upsert of it, the
arms in a seeded shuffled order per round; Qdrant's answer to the final ``upsert`` is replayed
(recorded once per arm), so only the guard's own work is on the clock. Prints each arm's median
and quartiles (wall and CPU ms per upsert), then per-round ratios (CPU, then wall; median and
quartiles) to text_field, of credentials to no-reread, to unshared and to old-escapes, and the
CPU each adds a point. ``--profile ARM`` instead runs cProfile over 5 upserts of that arm and prints the top
functions by own and cumulative time.
"""
from __future__ import annotations

import argparse
import cProfile
import copy
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _harness as H  # noqa: E402
from qdrant_guard import field_screen  # noqa: E402
from _ab import ratio_quartiles, summary  # noqa: E402
from _harness import models  # noqa: E402
from tests import detect_escapes_old  # noqa: E402

LINES = 2  # sentences of the summary, one a line (--lines)
ARMS = {"text_field": "text_field", "credentials": "credentials", "all": "all", "no-reread": "credentials",
        "unshared": "credentials", "old-escapes": "credentials"}

_WORDS = ("the policy covers leave requests for staff in the regional office and applies from the next "
          "quarter onward while managers review each case with payroll before approval is given to the "
          "employee who asked about benefits pension contributions training budget travel expenses and "
          "remote work arrangements agreed during the annual review").split()
_NAMES = ("Maria Lopez", "Chen Wei", "Amina Diallo", "John Carter", "Priya Nair", "Lukas Brandt")


def _sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def payload(rng: random.Random, i: int, r: int) -> dict:
    """One point's payload in round ``r`` (strings other than categories are new each round)."""
    name = _NAMES[(i + r) % len(_NAMES)]
    user = name.lower().replace(" ", ".")
    text = " ".join(_sentence(rng, rng.randint(10, 18)) for _ in range(rng.randint(2, 3)))
    if i % 4 == 0:
        text += f" Contact {user}@example.com for details."
    created = f"2026-{1 + r % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{r % 60:02d}:00Z"
    meta = {"page": i % 40 + 1, "lang": "en", "created": created, "revision": r * 1000 + i}
    if i % 4 == 1:
        meta["path"] = f"C:\\share\\hr\\{rng.choice(_WORDS)}_{r}_{i}.docx"
    if i % 5 == 2:
        meta["remark"] = f'{name} said "approved" for case {r}-{i}'
    author = {"name": name, "dept": "hr"}
    if i % 3 == 0:
        author["email"] = f"{user}@example.com"
    return {
        "text": text,
        "title": f"{_sentence(rng, 5)[:-1]} ({r}-{i})",
        "summary": "\n".join(_sentence(rng, 7 if k == 0 else 6) for k in range(LINES)) + f" Ref {r}-{i}.",
        "source": f"doc{i % 50}",
        "status": ("published", "draft", "archived")[i % 3],
        "author": author,
        "tags": ["policy", ("benefits", "leave", "payroll")[i % 3]],
        "meta": meta,
        "score": round(rng.random(), 4),
        "views": rng.randint(0, 5000),
    }


_stored_findings = field_screen.stored_findings
_shared_read_min = field_screen._SHARED_READ_MIN


def _no_reread(name: str, value: str, read: object = None) -> list:
    """For the ``no-reread`` arm only: the screen without the JSON-escaped re-reading (not a safe
    screen: it misses '\\na8f3...')."""
    return []


def batch(r: int, n: int, rows) -> list[models.PointStruct]:
    rng = random.Random(H.SEED * 1000 + r)
    return [models.PointStruct(id=i, vector=rows[i].tolist(), payload=payload(rng, i, r)) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--points", type=int, default=256)
    ap.add_argument("--noised", action="store_true",
                    help="raw_in_boundary = false: every vector noised and receipted (a costlier upsert)")
    ap.add_argument("--lines", type=int, default=2, help="sentences of the summary field, one a line (2)")
    ap.add_argument("--profile", choices=["text_field", "credentials", "all"])
    a = ap.parse_args()
    global LINES
    LINES = a.lines

    pol = {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": not a.noised,
           "noise_on_write": True,
           "text_field": "text", "source_field": "source", "diversity": {"enabled": False},
           "intent": {"enabled": False}}
    bed = H.make_bed({arm: {**pol, "payload_fields": pf} for arm, pf in ARMS.items()})
    rows = H.unit_rows(a.points, 384, H.SEED)
    reps = {}
    for arm in ARMS:
        name = H.fill(bed, arm, 0, 384)
        rep = H.Replay(bed.owner, "upsert", (name,), {"points": batch(-1, a.points, rows)})
        rep.record()
        reps[arm] = rep
    # Warm every arm (code paths, key memory) on batches no timed round uses.
    for w in range(2):
        for rep in reps.values():
            rep.kwargs = {"points": batch(-2 - w, a.points, rows)}
            rep.run()

    if a.profile:
        rep = reps[a.profile]
        batches = [batch(100 + k, a.points, rows) for k in range(5)]
        prof = cProfile.Profile()
        for b in batches:
            rep.kwargs = {"points": b}
            prof.enable()
            rep.run()
            prof.disable()
        st = pstats.Stats(prof)
        st.sort_stats("tottime").print_stats(25)
        st.sort_stats("cumulative").print_stats(40)
        bed.close()
        return

    order = random.Random(H.SEED)
    wall: dict[str, list[float]] = {k: [] for k in ARMS}
    cpu: dict[str, list[float]] = {k: [] for k in ARMS}
    for r in range(a.rounds):
        base = batch(r, a.points, rows)
        arms = list(ARMS)
        order.shuffle(arms)
        for arm in arms:
            reps[arm].kwargs = {"points": copy.deepcopy(base)}
            if arm == "no-reread":
                field_screen.stored_findings = _no_reread
            elif arm == "unshared":
                field_screen._SHARED_READ_MIN = 1 << 62
            elif arm == "old-escapes":
                detect_escapes_old.install()
            c, t = time.process_time(), time.perf_counter()
            reps[arm].run()
            wall[arm].append((time.perf_counter() - t) * 1e3)
            cpu[arm].append((time.process_time() - c) * 1e3)
            field_screen.stored_findings = _stored_findings
            field_screen._SHARED_READ_MIN = _shared_read_min
            detect_escapes_old.restore()
    forwarded = {arm: rep.forwarded for arm, rep in reps.items()}
    bed.close()

    print(f"guarded upsert of {a.points} points, Qdrant's answer replayed; {a.rounds} rounds; "
          f"requests forwarded to Qdrant: {forwarded}")
    for arm in ARMS:
        print("  " + summary(arm, wall[arm], "ms wall", width=11))
        print("  " + summary("", cpu[arm], "ms CPU", width=11))
    for arm, base in (("credentials", "text_field"), ("all", "text_field"), ("no-reread", "text_field"),
                      ("credentials", "no-reread"), ("credentials", "unshared"), ("credentials", "old-escapes")):
        ratios = [x / b for x, b in zip(wall[arm], wall[base])]
        cratios = [x / b for x, b in zip(cpu[arm], cpu[base])]
        per_point = [(x - b) * 1e3 / a.points for x, b in zip(cpu[arm], cpu[base])]
        print(f"  {arm}/{base}: CPU {ratio_quartiles(cratios)}  wall {ratio_quartiles(ratios)}  "
              f"added per point {statistics.median(per_point):.1f} us CPU (median of rounds)")

if __name__ == "__main__":
    main()

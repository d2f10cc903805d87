"""Markdown report, frontier plot and target checks for an evaluation run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["check_targets", "recall_ratio", "recommend", "write_report", "CLASS_CEILINGS"]

#: Epsilon ceilings per sensitivity class (the policy defaults; PUBLIC has none).
try:
    from ..policy import DEFAULT_CEILINGS as _CEILINGS

    CLASS_CEILINGS: dict[str, float | None] = {"PUBLIC": None, **_CEILINGS}
except ImportError:  # the policy module is written by another engineer in parallel
    CLASS_CEILINGS = {"PUBLIC": None, "PII": 2.0, "CREDENTIAL": 1.0, "PROPRIETARY": 8.0}

SECRET_MAX_X_CHANCE = 2.0
IDENT_MAX_ADVANTAGE = 0.05
MIN_RECALL_RATIO = 0.95


def _row(results: dict[str, Any], *, policy_default: bool, redaction: bool) -> dict[str, Any]:
    rows: list[dict[str, Any]] = results["levels"]
    for r in rows:
        if r["policy_default"] == policy_default and r["redaction"] == redaction:
            return r
    raise KeyError("no such level in the results")


def recall_ratio(row: dict[str, Any]) -> float:
    """A level's known-item recall / clean: the mean over its noise draws (runs made before draws
    existed have one)."""
    u = row["utility"]
    return float(u.get("recall_ratio_mean", u["recall_ratio"]))


def check_targets(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Check the three targets at the policy default level with redaction on.

    The identifier target is met only when the whole 95 % bootstrap interval of the advantage is
    within the limit: with a few dozen identifier labels the point estimate moves by several
    hundredths from one sample of texts to the next, so a point estimate under the limit is not
    evidence that the leak is that small.

    The recall target is judged on the mean over the level's noise draws (one draw is one sample
    of the keyed noise; the entry's ``draws`` gives their range and how many fell below).

    The identifier target is checked twice: on the corpus's own identifier tokens
    (``identifier_adaptive_advantage``: mostly code names that name their paragraph's subject, so
    they can be inferred from the topic the vector keeps) and on planted identifiers that carry no
    topic (``planted_identifier_adaptive_advantage``, :mod:`.planted`; absent from results of runs
    made before it existed).

    Returns:
        name -> ``{"value", "limit", "ok"}`` for ``secret_x_chance``,
        ``identifier_adaptive_advantage`` and ``planted_identifier_adaptive_advantage`` (both also
        with ``"interval"``) and ``recall_ratio``.
    """
    r = _row(results, policy_default=True, redaction=True)
    secret = r["secret"]["all"]["x_chance"]
    ratio = recall_ratio(r)
    out = {
        "secret_x_chance": {"value": secret, "limit": f"<= {SECRET_MAX_X_CHANCE:g}", "ok": secret <= SECRET_MAX_X_CHANCE},
        "identifier_adaptive_advantage": _advantage_target(r["bow_adaptive"]["identifier"]),
    }
    if "planted" in r:
        out["planted_identifier_adaptive_advantage"] = _advantage_target(r["planted"]["adaptive"])
    out["recall_ratio"] = {"value": ratio, "limit": f">= {MIN_RECALL_RATIO:g}", "ok": ratio >= MIN_RECALL_RATIO}
    draws = r["utility"].get("recall_ratio_draws")
    if draws and len(draws) > 1:
        out["recall_ratio"]["limit"] += f" (mean of {len(draws)} noise draws)"
        out["recall_ratio"]["draws"] = {"n": len(draws), "min": min(draws), "max": max(draws),
                                        "below": sum(1 for x in draws if x < MIN_RECALL_RATIO)}
    return out


def _advantage_target(attack: dict[str, Any]) -> dict[str, Any]:
    adv = attack["advantage"]
    interval = attack.get("advantage_ci")
    upper = interval[1] if interval else adv
    return {
        "value": adv, "limit": f"<= {IDENT_MAX_ADVANTAGE:g} (whole interval)",
        "ok": adv <= IDENT_MAX_ADVANTAGE and upper <= IDENT_MAX_ADVANTAGE,
        "interval": interval,
    }


#: Share of noise draws allowed under the recall limit at a recommended level.
MAX_DRAWS_BELOW = 0.1


def _draws(row: dict[str, Any]) -> list[float]:
    u = row["utility"]
    return list(u.get("recall_ratio_draws") or [u["recall_ratio"]])


def _reliable(row: dict[str, Any]) -> bool:
    draws = _draws(row)
    below = sum(1 for x in draws if x < MIN_RECALL_RATIO)
    return recall_ratio(row) >= MIN_RECALL_RATIO and below <= MAX_DRAWS_BELOW * len(draws)


def _draw_note(row: dict[str, Any]) -> str:
    draws = _draws(row)
    if len(draws) < 2:
        return ""
    below = sum(1 for x in draws if x < MIN_RECALL_RATIO)
    return f" (mean of {len(draws)} noise draws, {below} under {MIN_RECALL_RATIO:.0%})"


def recommend(results: dict[str, Any]) -> dict[str, str]:
    """Recommended operating point per sensitivity class, from the measured frontier.

    With redaction on, the strongest measured noise whose epsilon is within the class ceiling and
    whose known-item recall stays >= 95 % of clean on average over the noise draws and in at least
    90 % of them (one collection gets one draw, so a level that meets the target only on average
    is not recommended).
    """
    out: dict[str, str] = {}
    rows = [r for r in results["levels"] if r["redaction"]]
    for cls, ceiling in CLASS_CEILINGS.items():
        if ceiling is None:
            out[cls] = "redaction on; noise optional (public text: no privacy claim is made for it)"
            continue
        ok = [
            r
            for r in rows
            if r["epsilon"] is not None
            and r["epsilon"] <= ceiling
            and _reliable(r)
        ]
        if not ok:
            out[cls] = (
                f"no measured level meets both epsilon <= {ceiling:g} and recall >= 95 % of clean "
                "(on average and in 90 % of noise draws): "
                "calibrate on your own collection (`qdrant-guard calibrate`) or accept more recall loss"
            )
            continue
        best = max(ok, key=lambda r: r["sigma"])
        out[cls] = (
            f"redaction on + gaussian epsilon {best['epsilon']:.3g} at radius "
            f"{results['config']['policy']['radius']:g} (sigma {best['scale']:.4f}): recall "
            f"{recall_ratio(best):.1%} of clean{_draw_note(best)}, secret top-1 "
            f"{best['secret']['all']['x_chance']:.1f}x chance"
        )
    return out


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for red, style in ((False, "--"), (True, "-")):
        rows = sorted((r for r in results["levels"] if r["redaction"] == red), key=lambda r: r["sigma"])
        xs = [r["scale"] for r in rows]
        tag = "redaction on" if red else "redaction off"
        axes[0].plot(xs, [recall_ratio(r) for r in rows], style, marker="o", label=f"recall@10 / clean ({tag})")
        axes[0].plot(xs, [r["utility"]["overlap"] for r in rows], style, marker="s", label=f"overlap@10 ({tag})")
        axes[1].plot(xs, [r["secret"]["all"]["top1"] for r in rows], style, marker="o", label=f"secret top-1 ({tag})")
        axes[1].plot(xs, [r["reid"]["top1"] for r in rows], style, marker="^", label=f"re-identification top-1 ({tag})")
        axes[2].plot(xs, [r["bow_adaptive"]["identifier"]["advantage"] for r in rows], style, marker="o", label=f"identifier F1 - prior ({tag})")
        axes[2].plot(xs, [r["bow_adaptive"]["topic"]["advantage"] for r in rows], style, marker="s", label=f"topic F1 - prior ({tag})")
        if all("over_reference" in r["bow_adaptive"]["identifier"] for r in rows):
            axes[2].plot(xs, [r["bow_adaptive"]["identifier"]["over_reference"] for r in rows], style, marker="v",
                         label=f"identifier F1 - topic-only reference ({tag})")
        if all("planted" in r for r in rows):
            axes[2].plot(xs, [r["planted"]["adaptive"]["advantage"] for r in rows], style, marker="D",
                         label=f"planted identifier F1 - prior ({tag})")
    pd = _row(results, policy_default=True, redaction=True)["scale"]
    chance = results["levels"][0]["secret"]["all"]["chance"]
    axes[0].axhline(MIN_RECALL_RATIO, color="grey", lw=0.8)
    axes[1].axhline(chance, color="grey", lw=0.8)
    axes[1].set_yscale("log")
    axes[2].axhline(IDENT_MAX_ADVANTAGE, color="grey", lw=0.8)
    titles = ("utility", "secret recovery / re-identification (log)", "bag-of-words inversion (adaptive)")
    for ax, title in zip(axes, titles):
        ax.axvline(pd, color="red", lw=0.8, ls=":")
        ax.set_xlabel("noise sigma per coordinate (red: policy default)")
        ax.set_title(title)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: dict[str, Any], out_dir: str | Path, *, command: str = "") -> Path:
    """Write ``report.md``, ``frontier.png`` and ``results.json`` into ``out_dir``.

    Returns:
        The path of ``report.md``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    _plot(results, out / "frontier.png")
    cfg = results["config"]
    lines = [
        "# qdrant-guard eval report",
        "",
        f"Command: `{command}`" if command else "",
        "",
        f"Model all-MiniLM-L6-v2 (384-d); {cfg['n_docs']} pydoc paragraphs; {cfg['n_queries']} "
        f"known-item queries; {cfg['carriers']} secret carriers x {cfg['n_candidates']} candidates; "
        f"seed {cfg['seed']}; noise: gaussian, keyed mode, radius {cfg['policy']['radius']:g}, "
        f"delta {cfg['policy']['delta']:g}, clip_norm {cfg['policy']['clip_norm']}; noise on documents"
        + (" and queries" if cfg.get("noise_queries", True) else
           " only (queries clean, the guard's default: `noise_queries = false`)")
        + f". Run time {results['elapsed_s']:.0f} s. See docs/eval.md for the method.",
        "",
        f"Detector: {results['detector']['redacted']}/{results['detector']['planted']} planted secrets "
        "removed by `qdrant_guard.detect.redact`.",
        "",
        "Redaction on: "
        + ("`detect.redact`, then identifiers generalised to [NUMBER]/[CODE]/[NAME] "
           "(the default policy, `generalize_identifiers = true`)"
           if cfg.get("generalize_identifiers") else
           "`detect.redact` only (a policy with `generalize_identifiers = false`)")
        + ", for the documents and the queries.",
        "",
        "## Targets (policy default level, redaction on)",
        "",
        "| target | measured | 95 % bootstrap interval | limit | ok |",
        "|---|---|---|---|---|",
    ]
    targets = check_targets(results)
    for name, t in targets.items():
        ci = t.get("interval")
        span = f"{ci[0]:+.3f} .. {ci[1]:+.3f}" if ci else "—"
        lines.append(f"| {name} | {t['value']:.4f} | {span} | {t['limit']} | {'yes' if t['ok'] else 'NO'} |")
    d = targets["recall_ratio"].get("draws")
    if d:
        lines += [
            "",
            f"Known-item recall / clean over {d['n']} independent noise draws at the policy default: "
            f"{d['min']:.3f} .. {d['max']:.3f}, {d['below']} of {d['n']} draws under "
            f"{MIN_RECALL_RATIO:g}. One collection gets one draw (keyed noise); the target is judged "
            "on the mean.",
        ]
    ident = _row(results, policy_default=True, redaction=True)["bow_adaptive"]["identifier"]
    if "over_reference" in ident:
        lo, hi = ident["over_reference_ci"]
        lines += [
            "",
            f"The corpus's identifier tokens against the topic-only reference (not an issue target): "
            f"the adaptive attacker's F1 {ident['f1']:.3f} vs {ident['reference_f1']:.3f} for the same probe "
            f"on noise-free vectors of the texts with every identifier deleted, a difference of "
            f"{ident['over_reference']:+.3f} ({lo:+.3f} .. {hi:+.3f}). What the reference finds, the words "
            "the policy shares on purpose give away; see Attack 2.",
        ]
    lines += ["", "## Recommended operating point per sensitivity class", ""]
    for cls, text in recommend(results).items():
        lines.append(f"- **{cls}**: {text}")
    lines += [
        "",
        "## Utility",
        "",
        f"Clean known-item recall@10 = {results['clean']['recall']:.3f}, nDCG@10 = {results['clean']['ndcg']:.3f}.",
        "",
        "recall@10, nDCG@10 and overlap@10 are draw 0's (the draw the attacks see); the last column is "
        "recall / clean over every noise draw: mean (standard deviation, min .. max).",
        "",
        "| level | sigma | epsilon | redaction | recall@10 | / clean | nDCG@10 | overlap@10 | / clean over draws |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["levels"]:
        u = r["utility"]
        draws = u.get("recall_ratio_draws") or [u["recall_ratio"]]
        spread = (f"{recall_ratio(r):.3f} ({u.get('recall_ratio_sd', 0.0):.3f}, {min(draws):.3f} .. {max(draws):.3f})"
                  if len(draws) > 1 else "—")
        lines.append(
            f"| {r['level']} | {r['scale']:.4f} | {_fmt(r['epsilon'], '.3g')} | {'on' if r['redaction'] else 'off'} "
            f"| {u['recall']:.3f} | {u['recall_ratio']:.3f} | {u['ndcg']:.3f} | {u['overlap']:.3f} | {spread} |"
        )
    lines += [
        "",
        "## Attack 1: secret recovery by candidate ranking (top-1; chance = "
        f"{1 / cfg['n_candidates']:.2%})",
        "",
        "| level | sigma | redaction | all | x chance | ssn | card | api_key | mean rank pct |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["levels"]:
        s = r["secret"]
        ranks = [s[k]["mean_rank_pct"] for k in s if k != "all"]
        lines.append(
            f"| {r['level']} | {r['scale']:.4f} | {'on' if r['redaction'] else 'off'} | {s['all']['top1']:.2%} "
            f"| {s['all']['x_chance']:.1f} | {s.get('ssn', {}).get('top1', 0):.1%} | {s.get('card', {}).get('top1', 0):.1%} "
            f"| {s.get('api_key', {}).get('top1', 0):.1%} | {sum(ranks) / len(ranks):.3f} |"
        )
    lines += [
        "",
        "## Attack 2: bag-of-words inversion (micro-F1 on the test split)",
        "",
        f"Vocabulary: {cfg['bow_vocab']['identifier']} identifier tokens, {cfg['bow_vocab']['topic']} "
        f"topic words; split {cfg['bow_split']['train']} train / {cfg['bow_split']['test']} test.",
        "",
        "The adaptive advantage is the adaptive F1 minus the prior's, with its 95 % bootstrap interval "
        "over the test texts.",
    ]
    with_reference = all("over_reference" in r["bow_adaptive"]["identifier"] for r in results["levels"])
    if with_reference:
        ref = results["levels"][0]["bow_adaptive"]["identifier"]["reference_f1"]
        lines += [
            "",
            "*Over topic-only* compares the adaptive attacker with a topic-only reference instead of the "
            "prior: the same probe, trained and tested on noise-free vectors of the redacted texts with "
            f"every identifier deleted (`identifiers.drop_identifiers`); its identifier F1 is {ref:.3f}. "
            "Those vectors hold no identifier, not even a placeholder, so what the reference finds the "
            "rest of the text gives away. A difference at or below zero means the released vector tells "
            "the attacker nothing about the identifiers that the shared words do not.",
        ]
    lines += [
        "",
        "| level | sigma | redaction | ident prior | ident naive | ident adaptive | ident adaptive advantage "
        + ("| ident over topic-only " if with_reference else "")
        + "| topic prior | topic naive | topic adaptive |",
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if with_reference else ""),
    ]
    for r in results["levels"]:
        n, a = r["bow_naive"], r["bow_adaptive"]
        ci = a["identifier"].get("advantage_ci")
        span = f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""
        over = ""
        if with_reference:
            lo, hi = a["identifier"]["over_reference_ci"]
            over = f"| {a['identifier']['over_reference']:+.3f} [{lo:+.3f}, {hi:+.3f}] "
        lines.append(
            f"| {r['level']} | {r['scale']:.4f} | {'on' if r['redaction'] else 'off'} "
            f"| {a['identifier']['prior_f1']:.3f} | {n['identifier']['f1']:.3f} | {a['identifier']['f1']:.3f} "
            f"| {a['identifier']['advantage']:+.3f}{span} {over}"
            f"| {a['topic']['prior_f1']:.3f} | {n['topic']['f1']:.3f} | {a['topic']['f1']:.3f} |"
        )
    if all("planted" in r for r in results["levels"]):
        pc = cfg["planted"]
        lines += [
            "",
            "## Attack 2b: bag-of-words inversion of planted identifiers (micro-F1 on the test split)",
            "",
            f"Each paragraph carries one sentence naming a number, a code and a name, drawn from pools of "
            f"{pc['pool']} per kind independently of the paragraph ({pc['labels']} labels, {pc['per_text']} per "
            "text; same split). Unlike the corpus's own identifiers, these cannot be inferred from the "
            "topic: an advantage over the prior is read from the vector.",
            "",
            "| level | sigma | redaction | prior | naive | adaptive | adaptive advantage |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results["levels"]:
            n, a = r["planted"]["naive"], r["planted"]["adaptive"]
            ci = a.get("advantage_ci")
            span = f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else ""
            lines.append(
                f"| {r['level']} | {r['scale']:.4f} | {'on' if r['redaction'] else 'off'} "
                f"| {a['prior_f1']:.3f} | {n['f1']:.3f} | {a['f1']:.3f} | {a['advantage']:+.3f}{span} |"
            )
    lines += [
        "",
        "## Attack 3: nearest-neighbour re-identification in the corpus",
        "",
        f"Chance = 1/{cfg['n_docs']}.",
        "",
        "| level | sigma | redaction | top-1 | top-10 |",
        "|---|---|---|---|---|",
    ]
    for r in results["levels"]:
        lines.append(
            f"| {r['level']} | {r['scale']:.4f} | {'on' if r['redaction'] else 'off'} "
            f"| {r['reid']['top1']:.3f} | {r['reid']['top10']:.3f} |"
        )
    lines += ["", "![frontier](frontier.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path

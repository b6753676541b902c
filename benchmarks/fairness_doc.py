"""docs/benchmarks.md's "Fairness scenarios" section: trigger.dev's scenarios on fairstream
(``benchmarks.fairness_scenarios``), what was assumed to rebuild them, and how to run them.

``section`` renders it from one run's result (``table``: trigger.dev's published figures
beside the run's); ``with_section`` puts it into a rendered document (run_all's, before
"## Raw results"), replacing an older one; ``update_doc`` does that to docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.common import REPO
from benchmarks.dominant import table as dominant_table
from benchmarks.fairness_e2e import PARTITIONS, TICK_MS
from benchmarks.fairness_workloads import MODES

DOC = REPO / "docs" / "benchmarks.md"
HEADING = "## Fairness scenarios"

_SCENARIO_ROWS = (
    ("scenario", "slots", "tenants (runs; arrival; mean hold in ticks)", "study's source"),
    ("---", "---:", "---", "---"),
    (
        "adversarial skew",
        "5",
        "heavy: 250 over 30 tenant ids; light-1..5: 20 each; all at 0; hold 25",
        "`adversarialSkew`",
    ),
    (
        "key-splitting",
        "4",
        "an organisation's 10 ids x 30 at 0; light: 20, Poisson 40 per 1,000 ticks; hold 25",
        "`ckSybil`",
    ),
    (
        "key-splitting, 100 ids",
        "4",
        "the same 300 runs over 100 ids (3 each); light as above",
        "ours, not in the study",
    ),
    (
        "trickle",
        "4",
        "bulk: 240 at 0; trickle-1, -2: 30 each, Poisson 25 per 1,000 ticks; hold 25",
        "`ckTrickle`",
    ),
    ("heavy-idle", "4", "heavy: 200 at 0, alone; hold 25", "`ckHeavyIdle`"),
    (
        "weighted",
        "4",
        "big (weight 3) and small (weight 1): 300 each at 0; hold 30",
        "`weighted`",
    ),
)
SCENARIO_TABLE = "\n".join("| " + " | ".join(row) + " |" for row in _SCENARIO_ROWS)

ABOUT = f"""\
trigger.dev's fair-queueing study (PR 4353 in triggerdotdev/trigger.dev, "spike: fair
queueing for the run queue, caps vs scheduling"; `FINDINGS.md` and `CAPS_FINDINGS.md` under
`internal-packages/run-engine/src/run-queue/fairness-spike*/`) ranked dequeue disciplines on
a logical clock. Its scenarios, rebuilt with its parameters in
`benchmarks/fairness_scenarios.py`:

{SCENARIO_TABLE}

Metrics, as the study's `harness/metrics.ts` defines them (`fairstream/analysis/contention.py`):
a service is in the *contention window* when at least two tenants have arrived, unserved
work at that instant; a tenant's *share / weight* is its part of the window over its weight
over the summed weights of every tenant that contended; *worst* is the least-served
contender (1 fair, 0 starved) and Jain's index is over the contenders' shares / weight;
*wait* is service time minus arrival (the light tenants' mean of their means); *total drain
time* is the last service. Tenant grain: a tenant's ids count together (adversarial skew's
30 ids are one tenant); in key-splitting each id is a tenant, as the study counts, and the
organisation row counts the organisation's ids together. The study warns that share / weight
is volume-confounded for small tenants: key-splitting's 0.690 (the study's SFQ and DRR, and
every fairstream column) is the light key's whole volume, its 20 runs in a window of about
320 against an expected 1/11, the most it could get; its wait is the signal there.

Columns: trigger.dev's figures (its baseline, `FairQueueSelectionStrategy` or the CK Lua's
age order; its per-key concurrency cap of 2; SFQ; DRR); fairstream's core, as `fairstream
simulate --max-concurrency N` replays a trace (`fairstream.cli.simulate.replay`, the
emission rule's concurrency slots, a `ManualClock` in ticks), mean of three seeds: FIFO (one
queue), flat DRR (one share per tenant id) and tenant groups (separator `/`: the heavy
tenant's ids, or the organisation's, are one group); end to end, one scheduler on the
broker, seed-a, DRR and `--tenant-group-separator /`.

What was assumed, where the study's code could not be reused as it is:
- Random draws: the study's `seedrandom` streams are not reproduced; Python's `random`
  draws the same distributions (exponential holds, at least 1 tick, Poisson gaps) in the
  same order, three seeds. Single-seed published numbers (light waits of adversarial skew
  and weighted, from `results/*.json` seed-a) are compared with our mean of three.
- Key-splitting's figures (per-key cap 1,718, SFQ 462) are those of commit 1afa1476df,
  10 attacker ids; the PR's final revision used 20 (per-key cap 1,776, SFQ 1,009).
- Ties at one instant go in the study's order (time, tenant, run id): FIFO serves the
  heavy backlog first when all arrive at 0, so its worst share there is 0.
- The study drives a real Redis queue with a dequeue of one at a time; the core is asked
  one record at a time too, slots given back when a run's hold ends, before arrivals and
  picks of the same tick.
- End to end the API's limit is a rate of the same capacity, `--rate slots / mean hold`
  per tick, `--burst 1`, one tick {TICK_MS} ms ({PARTITIONS} ingest partitions), since no
  worker holds slots; arrival and service are `fairstream-enqueued-ms` and
  `fairstream-scheduled-ms`.
"""

REPRODUCE = """\
Reproduce (the core alone takes under a second; `make bench` runs it as run_all's
`fairness_scenarios` phase; `--write-traces` writes the seed-a traces and prints the
`fairstream simulate` commands that replay them as the fairstream DRR and groups columns):

```
.venv/bin/python -m benchmarks.fairness_scenarios --core-only
.venv/bin/python -m benchmarks.fairness_scenarios --bootstrap HOST:PORT --update-doc
.venv/bin/python -m benchmarks.fairness_scenarios --core-only --write-traces /tmp/traces
.venv/bin/python -m benchmarks.dominant --bootstrap HOST:PORT    # the DRF table alone
```
"""


def _n(value: float | None, digits: int = 0) -> str:
    """A number for the reading's sentences."""
    return "n/a" if value is None else f"{value:,.{digits}f}"


def reading(core: dict[str, Any]) -> list[str]:
    """What the core's columns say, beside the study's, with this run's numbers."""

    def of(scenario: str, mode: str, metric: str) -> float | None:
        value: float | None = core.get(scenario, {}).get(mode, {}).get(metric)
        return value

    split, many = "key-splitting", "key-splitting, 100 ids"
    return [
        "Reading (the core's columns):",
        "",
        f"- Adversarial skew: a flat DRR gives the heavy tenant's 30 ids 30 shares (worst "
        f"{_n(of('adversarial skew', 'drr', 'worst'), 3)}, the study's baseline 0.288); as "
        f"one group it gets one (worst {_n(of('adversarial skew', 'groups', 'worst'), 3)}, "
        f"SFQ 1.000; light tenants wait {_n(of('adversarial skew', 'groups', 'light_wait'))} "
        "ticks against SFQ's 319).",
        f"- Key-splitting: per id, fairstream's DRR behaves as the study's (the light key waits "
        f"{_n(of(split, 'drr', 'light_wait'))} ticks; its DRR 496, SFQ 462, per-key cap "
        "1,718); with the "
        f"organisation's ids in a group it waits {_n(of(split, 'groups', 'light_wait'))} and "
        f"the organisation gets its share (share / weight "
        f"{_n(of(split, 'groups', 'org_worst'), 3)}, not "
        f"{_n(of(split, 'drr', 'org_worst'), 3)}). Over 100 ids a flat DRR leaves the light "
        f"key 1 share of 101 ({_n(of(many, 'drr', 'light_wait'))} ticks, FIFO "
        f"{_n(of(many, 'fifo', 'light_wait'))}); grouped it waits "
        f"{_n(of(many, 'groups', 'light_wait'))}.",
        f"- Trickle: the trickling key waits {_n(of('trickle', 'drr', 'light_wait'))} ticks "
        "(SFQ 17, DRR 23, the study's baseline 1,107).",
        f"- Heavy-idle (one key, whose own wait is the wait row): every mode drains in "
        f"{_n(of('heavy-idle', 'drr', 'makespan'))} ticks, as FIFO does: work-conserving "
        "(the study's per-key cap doubled it to 2,507).",
        f"- Weighted: 3:1 holds (worst {_n(of('weighted', 'drr', 'worst'), 3)}; SFQ 1.000, DRR "
        "0.990); FIFO serves big's 300 first (the tie order), so its worst is 0.",
        "- Drain times differ from the study's by the draws (our holds are other samples of "
        "the same distribution), not by idling: on the same draws every mode drains within "
        f"{_percent(_spread(core))} of FIFO's time.",
        "",
    ]


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def _spread(core: dict[str, Any]) -> float | None:
    """The largest relative difference of a mode's drain time from FIFO's."""
    spreads = [
        abs(modes[m]["makespan"] / modes["fifo"]["makespan"] - 1)
        for modes in core.values()
        for m in ("drr", "groups")
        if "fifo" in modes and m in modes
    ]
    return max(spreads) if spreads else None


# trigger.dev's published figures: (baseline, per-key cap, SFQ, DRR), None where not run.
# FINDINGS.md (adversarial skew, weighted: contention worst share/weight and Jain, means of 3
# seeds; light wait: results/adversarialSkew.json and weighted.json, seed-a) and
# CAPS_FINDINGS.md at 1afa1476df (means of 3 seeds).
PUBLISHED: dict[tuple[str, str], tuple[float | None, ...]] = {
    ("adversarial skew", "worst"): (0.288, None, 1.000, 0.978),
    ("adversarial skew", "jain"): (0.311, None, 1.000, 0.997),
    ("adversarial skew", "light_wait"): (1380, None, 319, 323),
    ("key-splitting", "light_wait"): (1767, 1718, 462, 496),
    ("key-splitting", "worst"): (0.000, 0.367, 0.690, 0.690),
    ("key-splitting", "makespan"): (2067, 2148, 2068, 2071),
    ("trickle", "light_wait"): (1107, 19, 17, 23),
    ("trickle", "worst"): (0.279, 0.922, 0.909, 0.790),
    ("trickle", "makespan"): (1940, 3038, 1942, 1941),
    ("heavy-idle", "makespan"): (1240, 2507, 1240, 1240),
    ("heavy-idle", "light_wait"): (633, 1291, 633, 633),
    ("weighted", "worst"): (0.703, None, 1.000, 0.990),
    ("weighted", "jain"): (0.827, None, 1.000, 1.000),
    ("weighted", "light_wait"): (2712, None, 3366, 3369),
}
METRICS = {
    "worst": "worst tenant's share / weight (contention)",
    "org_worst": "worst organisation's share / weight",
    "jain": "Jain's index (contention)",
    "light_wait": "light tenants' mean wait (ticks)",
    "makespan": "total drain time (ticks)",
}
ROWS: dict[str, tuple[str, ...]] = {
    "adversarial skew": ("worst", "jain", "light_wait", "makespan"),
    "key-splitting": ("light_wait", "worst", "org_worst", "makespan"),
    # Per id, 3 runs each are too few for a share (the study's volume caveat): no "worst".
    "key-splitting, 100 ids": ("light_wait", "org_worst", "makespan"),
    "trickle": ("light_wait", "worst", "makespan"),
    "heavy-idle": ("makespan", "light_wait"),
    "weighted": ("worst", "jain", "light_wait", "makespan"),
}
HEADER = (
    "scenario",
    "metric",
    "trigger.dev baseline",
    "per-key cap",
    "SFQ",
    "DRR",
    "fairstream FIFO",
    "fairstream DRR",
    "fairstream groups",
    "end to end DRR",
    "end to end groups",
)


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if metric in ("worst", "org_worst", "jain") else f"{value:,.0f}"


def table(core: Mapping[str, Any], e2e: Mapping[str, Any] | None = None) -> list[str]:
    """The markdown table: published figures, then the core's three modes, then the broker's."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * 2 + " ---: |" * 9]
    for name, metrics in ROWS.items():
        for metric in metrics:
            published = PUBLISHED.get((name, metric), (None,) * 4)
            ours = [core.get(name, {}).get(m, {}).get(metric) for m in MODES]
            run = (e2e or {}).get(name, {})
            broker = [run.get(m, {}).get(metric) for m in ("drr", "groups")]
            cells = [_fmt(v, metric) for v in (*published, *ours, *broker)]
            lines.append(f"| {name} | {METRICS[metric]} | " + " | ".join(cells) + " |")
    return lines


def section(result: dict[str, Any]) -> str:
    """The section's markdown from a ``fairness_scenarios`` phase result."""
    if result.get("status") != "ok":
        return f"{HEADING}\n\nThe phase failed: {result.get('error')}\n"
    lines = [
        HEADING,
        "",
        ABOUT,
        *table(result["core"], result.get("e2e")),
        "",
        *reading(result["core"]),
        *(["", *dominant_table(result["drf"])] if result.get("drf") else []),
        REPRODUCE,
    ]
    errors = [
        f"- end to end {name} {mode}: {run['error']}"
        for name, modes in (result.get("e2e") or {}).items()
        for mode, run in modes.items()
        if "error" in run
    ]
    if errors:
        lines[-1:-1] = ["Failed runs:", "", *errors, ""]
    return "\n".join(lines)


def with_section(document: str, text: str) -> str:
    """``document`` with its fairness section replaced by ``text`` (inserted before "## Raw
    results", or at the end, when it has none)."""
    body = text.rstrip("\n") + "\n\n"
    start = document.find(HEADING)
    if start >= 0:
        end = document.find("\n## ", start + len(HEADING))
        return document[:start] + body + (document[end + 1 :] if end >= 0 else "")
    raw = document.find("## Raw results")
    if raw < 0:
        return document.rstrip("\n") + "\n\n" + body
    return document[:raw] + body + document[raw:]


def update_doc(text: str) -> None:
    DOC.write_text(with_section(DOC.read_text(encoding="utf-8"), text), encoding="utf-8")

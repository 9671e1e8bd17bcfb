#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The B7 table from the rec-serve JSONs that b7_gpu_cache.sh writes (one per run, named
# CONFIG[-PCT]-cCLIENTS.json): a markdown table on stdout and, with --json PATH, the rows as JSON.
#   python3 bench/recsys/b7_gpu_cache_table.py OUT [--json PATH]
import json
import pathlib
import re
import sys

ORDER = ["hbm", "none", "sync", "tau0.9", "tau0.9-prefetch", "tau0.25", "tau0.25-prefetch"]
LABEL = {
    "hbm": "tables in HBM (reference)",
    "none": "no cache (every row over the host link)",
    "sync": "gpu_cache, synchronous insertion only (tau 1)",
    "tau0.9": "gpu_cache, tau-threshold insertion (tau 0.9)",
    "tau0.9-prefetch": "gpu_cache, tau 0.9 + prefetch",
    "tau0.25": "gpu_cache, tau-threshold insertion (tau 0.25)",
    "tau0.25-prefetch": "gpu_cache, tau 0.25 + prefetch",
}


def row(path):
    m = re.fullmatch(r"(.+?)(?:-(\d+))?-c(\d+)", path.stem)
    config, pct, clients = m.group(1), m.group(2), int(m.group(3))
    j = json.loads(path.read_text())
    r = j["results"]
    out = {
        "config": config,
        "cache_pct_rows": int(pct) if pct else None,
        "clients": clients,
        "completed": r["completed"],
        "qps": r["throughput_qps"],
        "p50_ms": r["latency_ms"]["p50"],
        "p99_ms": r["latency_ms"]["p99"],
    }
    e = r.get("gpu_cache")
    if e:
        n = max(1, r["completed"])
        tabs = e["tables"]
        rates = [t["hit_rate"] for t in tabs]
        out.update({
            "cache_mib": e["cache_bytes"] / 2**20,
            "tau": e["tau"],
            "cache_rows_per_table": tabs[0]["cache_rows"],
            "table_rows": tabs[0]["table_rows"],
            "hit_rate": e["hit_rate"],
            "hit_rate_per_table": {t["table"]: t["hit_rate"] for t in tabs},
            "hit_rate_table_min": min(rates),
            "hit_rate_table_max": max(rates),
            # Per answered query (counters cover the warm-up and unanswered queries too: rough).
            "host_link_mib_per_query": e["host_link_bytes"] / 2**20 / n,
            "sync_rows_per_query": sum(t["sync_inserted_rows"] for t in tabs) / n,
            "async_rows_per_query": sum(t["async_inserted_rows"] for t in tabs) / n,
            "prefetched_rows_per_query": sum(t["prefetched_rows"] for t in tabs) / n,
        })
    return out


def main():
    out = pathlib.Path(sys.argv[1])
    done = [p for p in sorted(out.glob("*.json")) if p.stat().st_size > 0]
    for p in sorted(set(out.glob("*.json")) - set(done)):
        print(f"skipped {p}: empty (a failed or unfinished run)", file=sys.stderr)
    rows = [row(p) for p in done]
    rows.sort(key=lambda r: (r["clients"], r["cache_pct_rows"] or 0, ORDER.index(r["config"])))
    print("| clients | cache (% of rows, MiB) | configuration | QPS | p50 ms | p99 ms | hit rate "
          "(tables min..max) | host link MiB / query | rows / query: sync, async, prefetched |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cache = "-" if r["cache_pct_rows"] is None else f"{r['cache_pct_rows']}%, " \
            f"{r['cache_mib']:.1f}"
        if "hit_rate" in r:
            hit = f"{100 * r['hit_rate']:.1f}% ({100 * r['hit_rate_table_min']:.1f}.." \
                f"{100 * r['hit_rate_table_max']:.1f})"
            link = f"{r['host_link_mib_per_query']:.1f}"
            ins = f"{r['sync_rows_per_query']:.0f}, {r['async_rows_per_query']:.0f}, " \
                f"{r['prefetched_rows_per_query']:.0f}"
        else:
            hit, link, ins = "-", "0", "-"
        print(f"| {r['clients']} | {cache} | {LABEL[r['config']]} | {r['qps']:.1f} | "
              f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {hit} | {link} | {ins} |")
    if "--json" in sys.argv:
        pathlib.Path(sys.argv[sys.argv.index("--json") + 1]).write_text(
            json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

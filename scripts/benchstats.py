"""The figures every make bench script reports (scripts/bench*.sh): a
percentile by linear interpolation between closest ranks, and a row of a
bench.json's results."""


def pct(v, p):
    v = sorted(v)
    k = (len(v) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


def row(name, v, unit):
    return {"name": name, "unit": unit, "n": len(v), "p50": round(pct(v, 50), 2), "p95": round(pct(v, 95), 2),
            "min": round(min(v), 2), "max": round(max(v), 2)}


def row99(name, v, unit):
    """row, with p99 too."""
    r = row(name, v, unit)
    r["p99"] = round(pct(v, 99), 2)
    return r


def cold_warm_floor(raw, out, prefix, what, floor, key):
    """Three figures of one install (RAW/PREFIX-cold.txt, -warm.txt,
    -direct.txt: ms, one a line): WHAT through the cache cold and warm,
    beside FLOOR (the same without the cache), added to OUT (bench.json)
    with each ratio to the floor as KEY_cold_vs_direct_p50 and
    KEY_warm_vs_direct_p50; the rows printed."""
    import json, os
    load = lambda f: [float(x) for x in open(f"{raw}/{prefix}-{f}.txt") if x.strip()]
    cold = row(f"{what} through the cache, cold", load("cold"), "ms")
    warm = row(f"{what} through the cache, warm", load("warm"), "ms")
    direct = row(floor, load("direct"), "ms")
    res = json.load(open(out)) if os.path.exists(out) else {"schema": 1, "results": [], "ratios": {}, "versus": []}
    res["results"] += [cold, warm, direct]
    for a, k in ((cold, f"{key}_cold_vs_direct"), (warm, f"{key}_warm_vs_direct")):
        res.setdefault("versus", []).append({"figure": a["name"], "floor": direct["name"], "unit": "ms",
                                             "p50": a["p50"], "p95": a["p95"], "floor_p50": direct["p50"],
                                             "floor_p95": direct["p95"], "ratio_p50": round(a["p50"] / direct["p50"], 3),
                                             "ratio_p95": round(a["p95"] / direct["p95"], 3)})
        res["ratios"][k + "_p50"] = round(a["p50"] / direct["p50"], 3)
    json.dump(res, open(out, "w"), indent=2)
    for r in (cold, warm, direct):
        print(f"{r['name']:54} {r['unit']:>4} {r['n']:>4} {r['p50']:>9} {r['p95']:>9} {r['min']:>9} {r['max']:>9}")
    for k in (f"{key}_cold_vs_direct_p50", f"{key}_warm_vs_direct_p50"):
        print(f"{k:42} {res['ratios'][k]}")


if __name__ == "__main__":
    import sys
    if sys.argv[1:2] == ["cold-warm-floor"]:
        cold_warm_floor(*sys.argv[2:])

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

"""Compares torch_cases.py results across modes and prints the Markdown tables of
docs/benchmarks/pytorch-h100.md.

    python3 compare.py native=native.jsonl shm=shm.jsonl tcp=tcp.jsonl [neighbour=...] [oom=...]

A remote training case passes when it ran and each step's loss is within 1e-3 (relative) of the
native run's; a one-shot case when it checked itself and its values are within 1e-4 of native's.
A benchmark passes when it ran; its numbers are printed with the ratio to native. The exit status
is 0 whatever passed: the tables are the result.
"""

import json
import sys

LOSS_RTOL = 1e-3
VALUE_RTOL = 1e-4
REMOTE = ("shm", "ivshmem", "tcp", "shm-nolt", "tcp-nolt")
BENCH = {"bench_resnet50": ("images_per_s", "images/s", True), "bench_gpt2": ("tokens_per_s", "tokens/s", True),
         "bench_latency": ("median_us", "µs (median)", False)}


def load(path):
    results = {}
    try:
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if "case" in rec:
                    results[rec["case"]] = rec
    except FileNotFoundError:
        pass
    return results


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def flat(v):
    if isinstance(v, dict):
        return [x for k in sorted(v) for x in flat(v[k])]
    if isinstance(v, list):
        return [x for item in v for x in flat(item)]
    return [float(v)]


def verdict(rec, ref):
    """(status, note) of a remote record against the native one."""
    if rec is None:
        return "—", "not run"
    if rec["status"] != "PASS":
        return rec["status"], rec.get("reason", "")
    if ref is None or ref["status"] != "PASS":
        return "PASS", "(no native result to compare)"
    if "losses" in rec:
        a, b = rec["losses"], ref["losses"][:len(rec["losses"])]
        n = min(len(a), len(b))
        worst = max((rel(a[i], b[i]), i) for i in range(n))
        if worst[0] > LOSS_RTOL:
            return "FAIL", f"loss at step {worst[1]} differs by {worst[0]:.2e} (relative) from native"
        return "PASS", "bitwise equal losses" if worst[0] == 0 else f"losses within {worst[0]:.1e} of native"
    if "values" in rec:
        a, b = flat(rec["values"]), flat(ref["values"])
        worst = max((rel(x, y) for x, y in zip(a, b)), default=0.0)
        if len(a) != len(b) or worst > VALUE_RTOL:
            return "FAIL", f"values differ from native by {worst:.2e}"
        return "PASS", "equal to native" if worst == 0 else f"within {worst:.1e} of native"
    return "PASS", ""


def main():
    modes = dict(arg.split("=", 1) for arg in sys.argv[1:])
    res = {m: load(p) for m, p in modes.items()}
    native = res.get("native", {})
    remote = [m for m in REMOTE if m in res]
    cases = []
    for m in res:
        for c in res[m]:
            if c not in cases and c not in BENCH and (m == "native" or m in REMOTE):
                cases.append(c)

    print("| case | native | " + " | ".join(f"gpucloud {m}" for m in remote) + " |")
    print("| --- | --- |" + " --- |" * len(remote))
    for c in cases:
        n = native.get(c)
        cells = [f"{n['status']}{': ' + n['reason'] if n.get('reason') else ''}" if n else "—"]
        for m in remote:
            st, note = verdict(res[m].get(c), n)
            cells.append(f"{st}{': ' + note if note else ''}")
        print(f"| {c} | " + " | ".join(x.replace("|", "/") for x in cells) + " |")

    if "neighbour" in res or "oom" in res:
        print("\n| shared tier (same GPU, two sessions) | result |")
        print("| --- | --- |")
        st, note = verdict(res.get("oom", {}).get("oom"), None)
        extra = res.get("oom", {}).get("oom", {}).get("metrics", {}).get("oom", "")
        print(f"| session over its quota | {st}{': ' + note if note else ''}{' — ' + extra if extra else ''} |")
        st, note = verdict(res.get("neighbour", {}).get("neighbour"), native.get("mlp"))
        print(f"| neighbour training meanwhile (MLP, losses vs native) | {st}{': ' + note if note else ''} |")

    print("\n| benchmark | native | " + " | ".join(f"gpucloud {m}" for m in remote) + " |")
    print("| --- | --- |" + " --- |" * len(remote))
    for c, (key, unit, higher) in BENCH.items():
        n = native.get(c)
        base = n["metrics"][key] if n and n["status"] == "PASS" else None
        cells = [f"{base:,.1f} {unit}{spread(n['metrics'], key)}" if base else (f"{n['status']}: {n.get('reason', '')}" if n else "—")]
        for m in remote:
            r = res[m].get(c)
            if r and r["status"] == "PASS":
                v = r["metrics"][key]
                if not base:
                    cells.append(f"{v:,.1f}{spread(r['metrics'], key)}")
                elif higher:
                    cells.append(f"{v:,.1f} ({v / base:.2f} of native){spread(r['metrics'], key)}")
                else:
                    cells.append(f"{v:,.1f} ({v / base:.2f}× native){spread(r['metrics'], key)}")
            else:
                cells.append(f"{r['status']}: {r.get('reason', '')}" if r else "—")
        print(f"| {c} | " + " | ".join(x.replace("|", "/") for x in cells) + " |")


def spread(metrics, key):
    """The range of a benchmark's repetitions (throughput) or its 10th-90th percentiles (latency)."""
    if key + "_min" in metrics:
        return f" [{metrics[key + '_min']:,.0f}-{metrics[key + '_max']:,.0f}, {metrics.get('reps', '?')} runs]"
    if "p10_us" in metrics:
        return f" [p10 {metrics['p10_us']:,.0f}, p90 {metrics['p90_us']:,.0f}]"
    return ""


if __name__ == "__main__":
    main()

"""PyTorch cases for scripts/gpu-torch.sh: the stock torch, natively and through gpucloud.

    python3 torch_cases.py --out results.jsonl CASE [CASE ...]

Each case runs in turn in this process and appends one JSON line to --out as it ends:
{"case", "status": PASS|FAIL|SKIP, "reason", "losses" | "values" | "metrics"}. A line
{"start": CASE} is written before a case begins, so the driver can tell a case that killed the
process (or hung: faulthandler ends the process after CASE_TIMEOUT seconds) and go on with the
rest in a fresh process. Results are compared across modes by compare.py, not here: a case
passes here when it ran and checked itself (e.g. against the CPU); equality with native is the
comparison's.

Everything random comes from seeded CPU generators and is moved to the GPU, so the data and the
initial weights are the same bits natively and remotely.
"""

import argparse
import faulthandler
import json
import math
import os
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = int(os.environ.get("TORCH_STEPS", "50"))
CASE_TIMEOUT = int(os.environ.get("CASE_TIMEOUT", "120"))
DEV = "cuda"


class Skip(Exception):
    """A case that cannot run here, with the reason."""


def sdpa_backends():
    # SDPA_NO_CUDNN=1: torch's own switch away from cuDNN's attention (which torch prefers on
    # Hopper), so a run where cuDNN is not remoted still shows how far the rest goes.
    if os.environ.get("SDPA_NO_CUDNN") == "1":
        torch.backends.cuda.enable_cudnn_sdp(False)


def deterministic():
    # Deterministic algorithms where torch has them (warn where not), so native and remote runs of
    # the same kernels give the same bits. CUBLAS_WORKSPACE_CONFIG is set by the driver.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def cpu_gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def train(model, batches, loss_fn, opt, autocast=None):
    losses = []
    model.train()
    for i in range(STEPS):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cuda", dtype=autocast):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if not all(math.isfinite(v) for v in losses):
        raise AssertionError(f"non-finite loss: {losses}")
    return {"losses": losses}


# ---- training cases ----

def mlp_model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10))


def mlp_batches():
    g = cpu_gen(2)
    return [(torch.randn(256, 512, generator=g).to(DEV), torch.randint(0, 10, (256,), generator=g).to(DEV))
            for _ in range(8)]


def case_mlp():
    deterministic()
    model = mlp_model().to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return train(model, mlp_batches(), F.cross_entropy, opt)


def cnn_model():
    torch.manual_seed(3)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10))


def cnn_case(cudnn):
    deterministic()
    torch.backends.cudnn.enabled = cudnn
    try:
        model = cnn_model().to(DEV)
        g = cpu_gen(4)
        batches = [(torch.randn(64, 3, 32, 32, generator=g).to(DEV), torch.randint(0, 10, (64,), generator=g).to(DEV))
                   for _ in range(8)]
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return train(model, batches, F.cross_entropy, opt)
    finally:
        torch.backends.cudnn.enabled = True


def case_cnn():
    return cnn_case(True)


def case_cnn_nocudnn():
    return cnn_case(False)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, seq):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def lm_loss(logits, y):
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))


def case_transformer():
    deterministic()
    sdpa_backends()
    torch.manual_seed(5)
    model = GPT(vocab=1000, d=256, heads=4, layers=4, seq=128).to(DEV)
    g = cpu_gen(6)
    batches = []
    for _ in range(8):
        t = torch.randint(0, 1000, (16, 129), generator=g)
        batches.append((t[:, :-1].contiguous().to(DEV), t[:, 1:].contiguous().to(DEV)))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    return train(model, batches, lm_loss, opt, autocast=torch.bfloat16)


# ---- one-shot cases: each checks itself against the CPU, and reports values for compare.py ----

def case_compile():
    deterministic()
    model = mlp_model().to(DEV)
    x = mlp_batches()[0][0]
    eager = model(x)
    t0 = time.perf_counter()
    compiled = torch.compile(model)
    out = compiled(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    err = (out - eager).abs().max().item() / max(eager.abs().max().item(), 1e-12)
    if err > 1e-3:
        raise AssertionError(f"compiled output differs from eager by {err:.3g} (relative)")
    out.sum().backward()  # the compiled backward too
    return {"values": {"out_sum": out.double().sum().item()}, "metrics": {"first_call_s": first}}


def rel(a, b):
    return ((a - b).norm() / max(b.norm().item(), 1e-30)).item()


def case_linalg():
    g = cpu_gen(7)
    a = torch.randn(256, 256, generator=g, dtype=torch.float64)
    b = torch.randn(256, 8, generator=g, dtype=torch.float64)
    s = a @ a.T + 256 * torch.eye(256, dtype=torch.float64)
    ad, bd, sd = a.to(DEV), b.to(DEV), s.to(DEV)
    x = torch.linalg.solve(ad, bd)
    w, v = torch.linalg.eigh(sd)
    u, sv, vh = torch.linalg.svd(ad)
    errs = {
        "solve": rel(ad @ x, bd),
        "eigh": rel(v @ torch.diag(w) @ v.T, sd),
        "svd": rel(u @ torch.diag(sv) @ vh, ad),
        "eigvals_vs_cpu": rel(w.cpu(), torch.linalg.eigvalsh(s)),
    }
    bad = {k: e for k, e in errs.items() if not e < 1e-9}
    if bad:
        raise AssertionError(f"residuals too large: {bad}")
    return {"values": {"svd_sum": sv.sum().item(), "eig_sum": w.sum().item()}, "metrics": errs}


def case_linalg_check():
    """scripts/torch-linalg-check.py's ops (solve, inv, cholesky, qr, eigh, svd; fp64 and fp32;
    one matrix and a batch, cuSOLVER preferred), each checked against the CPU, saved as
    $LINALG_SAVE_DIR/linalg-MODE.pt for its compare of native and remote (scripts/gpu-linalg.sh)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../scripts/torch-linalg-check.py")
    spec = importlib.util.spec_from_file_location("torch_linalg_check", path)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    ep = os.environ.get("GPUCLOUD_ENDPOINT", "")
    mode = "native" if not ep else "shm" if ep.startswith("unix:") else "tcp"
    errs, bad = check.run(os.path.join(os.environ.get("LINALG_SAVE_DIR", "."), f"linalg-{mode}.pt"))
    if bad:
        raise AssertionError(f"failed, or differs from the CPU beyond tolerance: {bad}")
    return {"metrics": errs}


def case_fft():
    g = cpu_gen(8)
    x = torch.randn(16, 256, 256, generator=g)
    y = torch.fft.rfft2(x.to(DEV))
    ref = torch.fft.rfft2(x)
    e = rel(y.cpu(), ref)
    if not e < 1e-5:
        raise AssertionError(f"rfft2 differs from the CPU's by {e:.3g}")
    back = torch.fft.irfft2(y, s=x.shape[-2:])
    e2 = rel(back.cpu(), x)
    if not e2 < 1e-5:
        raise AssertionError(f"irfft2(rfft2(x)) differs from x by {e2:.3g}")
    return {"values": {"abs_sum": y.abs().sum().item()}, "metrics": {"rel_err": e}}


def case_sparse():
    g = cpu_gen(9)
    dense = torch.randn(1024, 1024, generator=g)
    dense[torch.rand(1024, 1024, generator=g) > 0.01] = 0
    b = torch.randn(1024, 64, generator=g)
    ref = dense @ b
    out = {}
    for name, sp in (("coo", dense.to_sparse()), ("csr", dense.to_sparse_csr())):
        y = torch.sparse.mm(sp.to(DEV), b.to(DEV)) if name == "coo" else sp.to(DEV) @ b.to(DEV)
        e = rel(y.cpu(), ref)
        if not e < 1e-5:
            raise AssertionError(f"{name} sparse matmul differs from the CPU's dense product by {e:.3g}")
        out[name] = e
    return {"values": {"sum": ref.sum().item()}, "metrics": out}


def case_graphs():
    deterministic()
    model = mlp_model().to(DEV).eval()
    g = cpu_gen(10)
    static_x = torch.randn(64, 512, generator=g).to(DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_x)  # warm up outside the capture, as torch's docs do
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_y = model(static_x)
    sums = []
    for _ in range(3):
        x = torch.randn(64, 512, generator=g).to(DEV)
        static_x.copy_(x)
        graph.replay()
        with torch.no_grad():
            want = model(x)
        e = rel(static_y, want)
        if not e < 1e-6:
            raise AssertionError(f"replay differs from eager by {e:.3g}")
        sums.append(static_y.double().sum().item())
    return {"values": {"replay_sums": sums}}


# ---- shared tier: over quota, and a neighbour training meanwhile ----

def case_oom():
    if os.environ.get("GPUCLOUD_ENDPOINT") is None:
        raise Skip("natively there is no session quota")
    free, total = torch.cuda.mem_get_info()
    quota = int(os.environ["TORCH_QUOTA"])
    if total != quota:
        raise AssertionError(f"mem_get_info total {total}, want the session quota {quota}")
    keep = torch.empty(quota // 2, dtype=torch.uint8, device=DEV)  # within the quota: fine
    try:
        torch.empty(quota, dtype=torch.uint8, device=DEV)
    except torch.cuda.OutOfMemoryError as e:
        msg = str(e).splitlines()[0]
    else:
        raise AssertionError("allocating past the quota succeeded")
    del keep
    return {"values": {"quota": quota}, "metrics": {"free_before": free, "oom": msg[:160]}}


def case_neighbour():
    # The MLP case, longer: it trains while case_oom's session runs over its quota next to it. Its
    # first STEPS losses are compared with the native MLP's.
    global STEPS
    steps, STEPS = STEPS, STEPS * 6
    try:
        r = case_mlp()
    finally:
        STEPS = steps
    return r


# ---- benchmarks: throughput and latency, reported; the comparison computes the ratios ----

class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


def resnet50(classes=1000):
    layers, cin, mods = [], 64, [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                 nn.MaxPool2d(3, 2, 1)]
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            mods.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    return nn.Sequential(*mods, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


BENCH_REPS = int(os.environ.get("BENCH_REPS", "5"))


def timed_steps(step, warmup, steps, reps=None):
    """Seconds per step: the median of reps timed runs of steps steps each, after warmup steps;
    with the spread of the runs (min, max) so a table can say how stable the figure is."""
    reps = reps or BENCH_REPS
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) / steps)
    runs.sort()
    return runs[len(runs) // 2], runs[0], runs[-1]


def per_second(n, timing, key):
    med, lo, hi = timing
    return {key: n / med, key + "_min": n / hi, key + "_max": n / lo, "step_ms": med * 1e3,
            "reps": BENCH_REPS}


def resnet50_step(batch):
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(11)
    model = resnet50().to(DEV).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(batch, 3, 224, 224, device=DEV).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=DEV)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return step


def gpt2_step(batch):
    sdpa_backends()
    torch.manual_seed(12)
    model = GPT(vocab=50257, d=768, heads=12, layers=12, seq=1024).to(DEV)  # GPT-2 small, 124M
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    t = torch.randint(0, 50257, (batch, 1025), device=DEV)
    x, y = t[:, :-1].contiguous(), t[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm_loss(model(x), y)
        loss.backward()
        opt.step()
    return step


def case_bench_resnet50():
    batch = int(os.environ.get("RESNET_BATCH", "128"))
    m = per_second(batch, timed_steps(resnet50_step(batch), 8, 10), "images_per_s")
    return {"metrics": {**m, "batch": batch}}


def case_bench_gpt2():
    batch = int(os.environ.get("GPT_BATCH", "8"))
    m = per_second(batch * 1024, timed_steps(gpt2_step(batch), 5, 8), "tokens_per_s")
    return {"metrics": {**m, "batch": batch}}


def case_roundtrips():
    # Run with GPUCLOUD_TRACE=1: between the marks, the guest library's trace lists every frame a
    # benchmark step sends and whether the caller waited for its reply (roundtrips.py counts them).
    def mark(what):
        os.write(2, f"gpucloud-trace: MARK {what}\n".encode())

    model = mlp_model().to(DEV).eval()
    x = torch.randn(1, 512, device=DEV)
    with torch.inference_mode():
        for i in range(6):
            if i == 3:
                mark("latency 3")
            model(x)
            torch.cuda.synchronize()
    mark("end")
    for name, step in (("resnet50", resnet50_step(16)), ("gpt2", gpt2_step(1))):
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        mark(f"{name} 2")
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        mark("end")
    return {"metrics": {}}


def case_bench_latency():
    model = mlp_model().to(DEV).eval()
    x = torch.randn(1, 512, device=DEV)
    times = []
    with torch.inference_mode():
        for i in range(1100):
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            if i >= 100:
                times.append(time.perf_counter() - t0)
    times.sort()
    q = lambda f: times[int(len(times) * f)] * 1e6  # noqa: E731
    return {"metrics": {"median_us": q(0.5), "p10_us": q(0.1), "p90_us": q(0.9), "n": len(times)}}


# ---- what a program meets besides the training path ----

def case_profiler():
    # torch.profiler asks CUPTI (the wheel's libcupti) for GPU activity. Through gpucloud CUPTI
    # has no driver to attach to: the profiler must still run, CPU-only, and say so.
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(256, 256, device=DEV)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        y = (x @ x).relu().sum()
        torch.cuda.synchronize()
    events = prof.events()
    cpu = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CPU)
    gpu = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    if cpu == 0:
        raise AssertionError("the profiler recorded no CPU events")
    return {"values": {"sum": y.item()}, "metrics": {"cpu_events": cpu, "gpu_events": gpu}}


def case_nvrtc():
    # NVRTC compiles in the process (a compiler, no GPU needed); the module it makes is loaded and
    # launched through the driver API: torch's jiterator does both.
    # A function name of this process's own makes the source new to torch's kernel cache (on
    # disk), so NVRTC compiles it here; jiterator takes the name from the code (a leading comment
    # does not parse: the 19:23 H100 run).
    name = f"gc_fused_{os.getpid()}_{time.time_ns()}"
    code = f"template <typename T> T {name}(T x, T y) {{ return T(3) * x + y * y; }}"
    fn = torch.cuda.jiterator._create_jit_fn(code)
    g = cpu_gen(13)
    x, y = torch.randn(4096, generator=g), torch.randn(4096, generator=g)
    out = fn(x.to(DEV), y.to(DEV)).cpu()
    e = rel(out, 3 * x + y * y)
    if not e < 1e-6:
        raise AssertionError(f"jiterator output differs from the CPU's by {e:.3g}")
    return {"values": {"sum": out.double().sum().item()}}


def case_nccl():
    # torch.distributed with the nccl backend, one rank: init, all_reduce, barrier, destroy.
    import torch.distributed as dist
    port = int(os.environ.get("NCCL_CASE_PORT", "29531"))
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", world_size=1, rank=0,
                            device_id=torch.device(DEV, 0))
    try:
        t = torch.arange(1024, dtype=torch.float32, device=DEV)
        dist.all_reduce(t)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.barrier()
        want = torch.arange(1024, dtype=torch.float32)
        if not torch.equal(t.cpu(), want):
            raise AssertionError("all_reduce over one rank changed the tensor")
        version = ".".join(str(v) for v in torch.cuda.nccl.version())
    finally:
        dist.destroy_process_group()
    return {"values": {"sum": t.sum().item()}, "metrics": {"nccl": version}}


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def reason_of(e):
    msg = str(e).strip().splitlines()
    # torch's CUDA errors carry the useful line first; keep it short for the table.
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("cases", nargs="+")
    args = ap.parse_args()
    with open(args.out, "a") as out:
        def emit(rec):
            out.write(json.dumps(rec) + "\n")
            out.flush()

        try:
            ok = torch.cuda.is_available()
            why = "torch.cuda.is_available() is False"
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            ok, why = False, reason_of(e)
        for name in args.cases:
            emit({"start": name})
            if name not in CASES:
                emit({"case": name, "status": "FAIL", "reason": "no such case"})
                continue
            if not ok:
                emit({"case": name, "status": "FAIL", "reason": why})
                continue
            faulthandler.dump_traceback_later(CASE_TIMEOUT, exit=True)
            t0 = time.perf_counter()
            try:
                rec = {"case": name, "status": "PASS", **CASES[name]()}
            except Skip as e:
                rec = {"case": name, "status": "SKIP", "reason": str(e)}
            except Exception as e:  # noqa: BLE001 - every failure is a result
                traceback.print_exc()
                rec = {"case": name, "status": "FAIL", "reason": reason_of(e)}
            faulthandler.cancel_dump_traceback_later()
            rec["seconds"] = round(time.perf_counter() - t0, 2)
            emit(rec)
            print(f"{rec['status']} {name} ({rec['seconds']} s){': ' + rec['reason'] if rec.get('reason') else ''}",
                  flush=True)
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as e:  # noqa: BLE001 - a poisoned context ends this process's cases
                print(f"context unusable after {name}: {reason_of(e)}", file=sys.stderr)
                return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

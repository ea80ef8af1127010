#!/usr/bin/env python3
"""torch.linalg on the GPU, natively and through gpucloud's libcusolver, compared.

    torch-linalg-check.py run OUT.pt            runs the ops on cuda, checks each against the CPU,
                                                saves the results
    torch-linalg-check.py compare NATIVE.pt REMOTE.pt
                                                compares two runs' results, op by op

scripts/gpu-linalg.sh runs it natively and through gpucloud over shared memory on the GPU machine
(through gpu-torch.sh's case linalg_check). The ops: solve, inv, cholesky, qr, eigh, svd, in fp64
and fp32, on one matrix and on a batch, with torch's cuSOLVER backend preferred (MAGMA would take
some of them otherwise). Each op runs on its own: one that fails (on gpucloud, a call its libraries
refuse) is recorded with its error and the rest go on. The inputs come from a seeded CPU
generator, so both runs see the same bits. Results that are unique only up to signs
(eigenvectors, singular vectors, Q and R) are compared after each column's sign is fixed.
Tolerances, relative to the native result's norm: 1e-4 in fp64, 1e-3 in fp32; the self-check
against the CPU's fp64 allows ten times that.
"""

import sys

import torch

RTOL = {torch.float64: 1e-4, torch.float32: 1e-3}
# The self-check against the CPU's fp64 is a sanity bound, looser: fp32 eigenvectors of close
# eigenvalues differ from fp64's by about 1e-3 (measured on the H100).
SELF_RTOL = {torch.float64: 1e-3, torch.float32: 1e-2}
N, BATCH, BN = 96, 4, 24
# torch factors a batch of square matrices smaller than 512 with cuBLAS's getrfBatched whatever
# the preferred library; this batch takes cuSOLVER's getrf, one matrix at a time.
LU_BATCH, LU_N = 2, 512


def inputs(dtype):
    g = torch.Generator()
    g.manual_seed(15)
    a = torch.randn(N, N, generator=g, dtype=torch.float64)
    spd = a @ a.T + N * torch.eye(N, dtype=torch.float64)
    b = torch.randn(N, 3, generator=g, dtype=torch.float64)
    ab = torch.randn(BATCH, BN, BN, generator=g, dtype=torch.float64)
    spdb = ab @ ab.mT + BN * torch.eye(BN, dtype=torch.float64)
    lu = torch.randn(LU_BATCH, LU_N, LU_N, generator=g, dtype=torch.float64) + LU_N**0.5 * torch.eye(LU_N, dtype=torch.float64)
    lub = torch.randn(LU_BATCH, LU_N, 2, generator=g, dtype=torch.float64)
    return {k: v.to(dtype) for k, v in dict(a=a, spd=spd, b=b, ab=ab, spdb=spdb, lu=lu, lub=lub).items()}


def signfix(m):
    """Columns of m (batched) scaled by the sign of their largest-magnitude entry."""
    idx = m.abs().argmax(dim=-2, keepdim=True)
    s = torch.sign(torch.gather(m, -2, idx))
    s[s == 0] = 1
    return m * s


def qr(a):
    q, r = torch.linalg.qr(a)
    s = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    return {"q": q * s.unsqueeze(-2), "r": r * s.unsqueeze(-1)}


def eigh(a):
    w, v = torch.linalg.eigh(a)
    return {"w": w, "v": signfix(v)}


def svd(a):
    u, s, vh = torch.linalg.svd(a)
    return {"s": s, "u": signfix(u), "v": signfix(vh.mT)}


# Each op's results, sign-fixed where they are unique only up to signs.
OPS = {
    "solve": lambda x: {"x": torch.linalg.solve(x["a"], x["b"])},
    "solve_batched": lambda x: {"x": torch.linalg.solve(x["lu"], x["lub"])},
    "inv": lambda x: {"x": torch.linalg.inv(x["a"])},
    "cholesky": lambda x: {"l": torch.linalg.cholesky(x["spd"])},
    "cholesky_batched": lambda x: {"l": torch.linalg.cholesky(x["spdb"])},
    "qr": lambda x: qr(x["a"]),
    "eigh": lambda x: eigh(x["spd"]),
    "eigh_batched": lambda x: eigh(x["spdb"]),
    "svd": lambda x: svd(x["a"]),
    "svd_batched": lambda x: svd(x["ab"]),
}


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / max(b.norm().item(), 1e-300)).item()


def run(path):
    """Runs every op on cuda, each on its own (one that fails is recorded and the rest go on),
    and saves the results to path with the errors under "errors". Returns each result's
    difference from the CPU's, and what failed or is beyond the self-check's bound."""
    before = torch.backends.cuda.preferred_linalg_library()
    torch.backends.cuda.preferred_linalg_library("cusolver")
    res, errs, bad, failed = {}, {}, {}, {}
    try:
        for dtype in (torch.float64, torch.float32):
            x = inputs(dtype)
            xg = {k: v.cuda() for k, v in x.items()}
            for op, fn in OPS.items():
                tag = f"{op}_{str(dtype).split('.')[-1]}"
                try:
                    gpu = fn(xg)
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001 - every failure is a result
                    failed[tag] = str(e).strip().splitlines()[0][:300]
                    continue
                cpu = fn({k: v.double() for k, v in x.items()})
                for k, v in gpu.items():
                    name = f"{tag}.{k}"
                    res[name] = v.cpu()
                    errs[name] = rel(v, cpu[k])
                    if not errs[name] < SELF_RTOL[dtype]:
                        bad[name] = errs[name]
    finally:
        torch.backends.cuda.preferred_linalg_library(before)
    res["errors"] = failed
    torch.save(res, path)
    return errs, {**bad, **failed}


def compare(native_path, remote_path):
    native, remote = torch.load(native_path), torch.load(remote_path)
    nerr, rerr = native.pop("errors", {}), remote.pop("errors", {})
    failed = 0
    print("| result | relative difference | tolerance | |\n|---|---|---|---|")
    for name in sorted(native):
        tol = RTOL[native[name].dtype]
        if name not in remote:
            why = rerr.get(name.split(".")[0], "missing")
            print(f"| {name} | {why} | {tol:g} | FAIL |")
            failed += 1
            continue
        e = rel(remote[name], native[name])
        ok = e < tol
        failed += not ok
        print(f"| {name} | {e:.2e} | {tol:g} | {'PASS' if ok else 'FAIL'} |")
    for op, why in sorted(nerr.items()):
        print(f"| {op} | natively: {why} | | not compared |")
    print(f"{len(native) - failed} of {len(native)} results equal to native within tolerance")
    return failed == 0 and len(native) > 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        errs, bad = run(sys.argv[2])
        for k in sorted(errs):
            print(f"{k}: {errs[k]:.2e} from the CPU")
        if bad:
            sys.exit(f"failed, or differs from the CPU beyond tolerance: {bad}")
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(0 if compare(sys.argv[2], sys.argv[3]) else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

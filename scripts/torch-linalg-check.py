#!/usr/bin/env python3
"""torch.linalg on the GPU, natively and through gpucloud's libcusolver, compared.

    torch-linalg-check.py run OUT.pt            runs the ops on cuda, checks each against the CPU,
                                                saves the results
    torch-linalg-check.py compare NATIVE.pt REMOTE.pt
                                                compares two runs' results, op by op

scripts/gpu-linalg.sh runs it natively and through gpucloud over shared memory on the GPU machine
(through gpu-torch.sh's case linalg_check). The ops: solve, inv, cholesky, qr, eigh, svd, in fp64
and fp32, on one matrix and on a batch, with torch's cuSOLVER backend preferred (MAGMA would take
some of them otherwise). The inputs come from a seeded CPU generator, so both runs see the same
bits. Results that are unique only up to signs (eigenvectors, singular vectors, Q and R) are
compared after each column's sign is fixed. Tolerances, relative to the native result's norm:
1e-4 in fp64, 1e-3 in fp32 (a self-check against the CPU in fp64 uses the same).
"""

import sys

import torch

RTOL = {torch.float64: 1e-4, torch.float32: 1e-3}
N, BATCH, BN = 96, 4, 24


def inputs(dtype):
    g = torch.Generator()
    g.manual_seed(15)
    a = torch.randn(N, N, generator=g, dtype=torch.float64)
    spd = a @ a.T + N * torch.eye(N, dtype=torch.float64)
    b = torch.randn(N, 3, generator=g, dtype=torch.float64)
    ab = torch.randn(BATCH, BN, BN, generator=g, dtype=torch.float64)
    spdb = ab @ ab.mT + BN * torch.eye(BN, dtype=torch.float64)
    bb = torch.randn(BATCH, BN, 2, generator=g, dtype=torch.float64)
    return {k: v.to(dtype) for k, v in dict(a=a, spd=spd, b=b, ab=ab, spdb=spdb, bb=bb).items()}


def signfix(m):
    """Columns of m (batched) scaled by the sign of their largest-magnitude entry."""
    idx = m.abs().argmax(dim=-2, keepdim=True)
    s = torch.sign(torch.gather(m, -2, idx))
    s[s == 0] = 1
    return m * s


def ops(x):
    """Each op's results, sign-fixed where they are unique only up to signs."""
    out = {}
    out["solve"] = torch.linalg.solve(x["a"], x["b"])
    out["solve_batched"] = torch.linalg.solve(x["ab"], x["bb"])
    out["inv"] = torch.linalg.inv(x["a"])
    out["cholesky"] = torch.linalg.cholesky(x["spd"])
    out["cholesky_batched"] = torch.linalg.cholesky(x["spdb"])
    q, r = torch.linalg.qr(x["a"])
    s = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    out["qr_q"], out["qr_r"] = q * s.unsqueeze(-2), r * s.unsqueeze(-1)
    w, v = torch.linalg.eigh(x["spd"])
    out["eigh_w"], out["eigh_v"] = w, signfix(v)
    wb, vb = torch.linalg.eigh(x["spdb"])
    out["eigh_batched_w"], out["eigh_batched_v"] = wb, signfix(vb)
    u, sv, vh = torch.linalg.svd(x["a"])
    out["svd_s"], out["svd_u"], out["svd_v"] = sv, signfix(u), signfix(vh.mT)
    ub, svb, vhb = torch.linalg.svd(x["ab"])
    out["svd_batched_s"], out["svd_batched_u"], out["svd_batched_v"] = svb, signfix(ub), signfix(vhb.mT)
    return out


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / max(b.norm().item(), 1e-300)).item()


def run(path):
    """Runs the ops on cuda into path; returns each result's difference from the CPU's and those
    beyond tolerance."""
    before = torch.backends.cuda.preferred_linalg_library()
    torch.backends.cuda.preferred_linalg_library("cusolver")
    res, errs = {}, {}
    try:
        for dtype in (torch.float64, torch.float32):
            x = inputs(dtype)
            gpu = ops({k: v.cuda() for k, v in x.items()})
            torch.cuda.synchronize()
            cpu = ops({k: v.double() for k, v in x.items()})
            for k, v in gpu.items():
                name = f"{k}_{str(dtype).split('.')[-1]}"
                res[name] = v.cpu()
                errs[name] = rel(v, cpu[k])
    finally:
        torch.backends.cuda.preferred_linalg_library(before)
    torch.save(res, path)
    tol = lambda name: RTOL[torch.float64 if name.endswith("float64") else torch.float32]  # noqa: E731
    bad = {k: e for k, e in errs.items() if not e < tol(k)}
    return errs, bad


def compare(native_path, remote_path):
    native, remote = torch.load(native_path), torch.load(remote_path)
    failed = 0
    print("| op | relative difference | tolerance | |\n|---|---|---|---|")
    for name in sorted(native):
        tol = RTOL[native[name].dtype]
        if name not in remote:
            print(f"| {name} | missing | {tol:g} | FAIL |")
            failed += 1
            continue
        e = rel(remote[name], native[name])
        ok = e < tol
        failed += not ok
        print(f"| {name} | {e:.2e} | {tol:g} | {'PASS' if ok else 'FAIL'} |")
    print(f"{len(native) - failed} of {len(native)} results equal to native within tolerance")
    return failed == 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        errs, bad = run(sys.argv[2])
        for k in sorted(errs):
            print(f"{k}: {errs[k]:.2e} from the CPU")
        if bad:
            sys.exit(f"differs from the CPU beyond tolerance: {bad}")
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(0 if compare(sys.argv[2], sys.argv[3]) else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""torch-fft-sparse-check.py: the stock PyTorch's FFTs and sparse products on the GPU, each checked
against the CPU's (1e-4 relative), and, through gpucloud, against the same ops run natively.

    python3 torch-fft-sparse-check.py --save native.pt       natively: results saved
    python3 torch-fft-sparse-check.py --compare native.pt    through gpucloud: compared with them

Prints one PASS/FAIL line per op; exits 1 if any failed. scripts/gpu-mathlibs.sh runs it both ways.
"""
import argparse
import sys

import torch

TOL = 1e-4


def rel(a, b):
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.is_sparse or a.layout != torch.strided:
        a = a.to_dense()
    d = (a - b).abs().double().norm()
    n = b.abs().double().norm()
    return (d / n).item() if n > 0 else d.item()


def ops():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(8, 1000, generator=g)
    xc = torch.complex(torch.randn(4, 1024, generator=g), torch.randn(4, 1024, generator=g))
    img = torch.randn(3, 64, 48, generator=g)
    xd = torch.randn(2, 500, generator=g, dtype=torch.float64)
    dense = torch.randn(512, 384, generator=g)
    dense[torch.rand(512, 384, generator=g) > 0.02] = 0
    b = torch.randn(384, 32, generator=g)
    v = torch.randn(384, generator=g)
    coo, csr = dense.to_sparse(), dense.to_sparse_csr()
    dev = "cuda"
    return {
        "fft": (lambda: torch.fft.fft(xc.to(dev)), torch.fft.fft(xc)),
        "ifft": (lambda: torch.fft.ifft(xc.to(dev)), torch.fft.ifft(xc)),
        "rfft": (lambda: torch.fft.rfft(x.to(dev)), torch.fft.rfft(x)),
        "irfft": (lambda: torch.fft.irfft(torch.fft.rfft(x.to(dev)), n=1000), x),
        "fft2": (lambda: torch.fft.fft2(img.to(dev)), torch.fft.fft2(img)),
        "rfftn_odd": (lambda: torch.fft.rfftn(img[:, :63, :47].to(dev)), torch.fft.rfftn(img[:, :63, :47])),
        "fft_double": (lambda: torch.fft.fft(xd.to(dev)), torch.fft.fft(xd)),
        "sparse_mm_coo": (lambda: torch.sparse.mm(coo.to(dev), b.to(dev)), dense @ b),
        "csr_matmul": (lambda: csr.to(dev) @ b.to(dev), dense @ b),
        "csr_matvec": (lambda: csr.to(dev) @ v.to(dev), dense @ v),
        "csr_addmm": (lambda: torch.addmm(b[:1].to(dev).expand(512, 32) * 0 + 1, csr.to(dev), b.to(dev), beta=0.5, alpha=2.0),
                      0.5 + 2.0 * (dense @ b)),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--save")
    ap.add_argument("--compare")
    a = ap.parse_args()
    native = torch.load(a.compare) if a.compare else {}
    results, failed = {}, 0
    for name, (gpu, cpu) in ops().items():
        try:
            y = gpu()
            torch.cuda.synchronize()
            y = y.cpu()
            if y.layout != torch.strided:
                y = y.to_dense()
            results[name] = y
            e = rel(y, cpu)
            msg = f"vs CPU {e:.2e}"
            ok = e < TOL
            if name in native:
                en = rel(y, native[name])
                msg += f", vs native {en:.2e}"
                ok = ok and en < TOL
            print(f"{'PASS' if ok else 'FAIL'} {name}: {msg}", flush=True)
            failed += not ok
        except Exception as ex:  # an op that fails is reported, the rest still run
            print(f"FAIL {name}: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
            failed += 1
    if a.save:
        torch.save(results, a.save)
    print(f"{len(results) - failed if failed <= len(results) else 0} of {len(ops())} passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

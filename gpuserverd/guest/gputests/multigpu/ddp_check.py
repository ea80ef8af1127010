"""ddp_check.py: one rank of PyTorch DistributedDataParallel training of a small MLP on fixed data,
started as torchrun starts ranks (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment;
rank r on cuda:r). Rank 0 prints one JSON line: the mean loss of every step, a checksum of the
trained weights, whether the ranks' weights agree, and torch.distributed all-reduce bus bandwidth
at 1 GiB (float32, 10 timed after 3 warm-up). The same script runs natively and through gpucloud;
scripts/gpu-multigpu.sh compares the two."""
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 30


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).to(dev)
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1234 + rank)
    xs = torch.randn(STEPS, 64, 256, generator=g).to(dev)
    ys = torch.randint(0, 10, (STEPS, 64), generator=g).to(dev)
    losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(xs[step]), ys[step])
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    train_s = time.time() - t0
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    mine = flat.double().sum()
    sums = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(sums, mine)
    agree = all(bool(s == sums[0]) for s in sums)
    # torch.distributed all-reduce bandwidth at 1 GiB.
    big = torch.ones(1 << 28, device=dev)
    for _ in range(3):
        dist.all_reduce(big)
    torch.cuda.synchronize()
    a = time.time()
    for _ in range(10):
        dist.all_reduce(big)
    torch.cuda.synchronize()
    t = (time.time() - a) / 10
    algbw = big.numel() * 4 / t / 1e9
    if rank == 0:
        print(json.dumps({
            "world": world, "losses": losses, "weights_sum": float(mine), "ranks_agree": agree,
            "train_seconds": round(train_s, 3), "torch_allreduce_1GiB_us": round(t * 1e6, 1),
            "torch_busbw_GBps": round(algbw * 2 * (world - 1) / world, 2),
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

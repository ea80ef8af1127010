"""An MLP training loop for scripts/gpu-migration.sh: STEPS steps with fixed seeds and data from a
seeded CPU generator, one loss per line as JSON. With --pause-at N it prints "MIDWAY" after step N
and waits for the file --go to exist before going on (the script moves the session meanwhile);
a run without them is the unmigrated run its losses are compared with."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=120)
p.add_argument("--pause-at", type=int, default=0)
p.add_argument("--go", default="")
a = p.parse_args()

torch.use_deterministic_algorithms(True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(1)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(2)
batches = [(torch.randn(128, 256, generator=g).cuda(), torch.randint(0, 10, (128,), generator=g).cuda()) for _ in range(16)]
for step in range(1, a.steps + 1):
    x, y = batches[step % len(batches)]
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print(json.dumps({"step": step, "loss": loss.item()}), flush=True)
    if step == a.pause_at:
        print("MIDWAY", flush=True)
        deadline = time.time() + 200
        while not os.path.exists(a.go) and time.time() < deadline:
            # the program keeps running on the GPU while its session moves
            opt.zero_grad(set_to_none=False)
            time.sleep(0.01)
print("TRAIN DONE", flush=True)
sys.exit(0)

#!/usr/bin/python3
"""xor_train.py OUT_DIR STEP... — a small mixed-precision-style training
run with Debian's torch, for test-xor-keyframe.sh: after each given step,
OUT_DIR/step-<step>/ckpt.pt is torch.save of the bf16 weights (the
master's .to(torch.bfloat16)), the fp32 master and AdamW's state (one
file, as trainers save a checkpoint).  Deterministic (seeded, one thread).
FINETUNE=1 in the environment: a fine-tune instead, the first layer
frozen (its weights the same in every checkpoint, no optimizer state),
the rest trained at a small learning rate from the same start.  SEED=N:
another model and data (default 1), as another node of a job trains.
"""
import os
import sys

import torch

torch.manual_seed(int(os.environ.get("SEED", "1")))
torch.set_num_threads(1)
out, steps = sys.argv[1], sorted(int(s) for s in sys.argv[2:])
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
if os.environ.get("FINETUNE") == "1":
    for p in model[0].parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
else:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
x = torch.randn(64, 256)
y = torch.randn(64, 256)
for step in range(1, steps[-1] + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if step in steps:
        d = os.path.join(out, "step-%d" % step)
        os.makedirs(d, exist_ok=True)
        master = {k: v.detach().clone() for k, v in model.state_dict().items()}
        torch.save({"model": {k: v.to(torch.bfloat16) for k, v in master.items()},
                    "master": master, "optimizer": opt.state_dict(), "step": step},
                   os.path.join(d, "ckpt.pt"))

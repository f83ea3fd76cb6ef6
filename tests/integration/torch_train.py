#!/usr/bin/python3
"""Deterministic CPU training of a tiny model, for test-torch-resume.sh.

    torch_train.py --steps N [--start S] [--resume DIR] [--no-rng]
                   [--ckpt-root DIR --every E [--commit]] --losses FILE

Trains steps S+1..N (S is 0, or the step stored in the checkpoint given to
--resume) and appends "step float.hex(loss)" per step to FILE, so runs can
be compared bit for bit.  Every E steps it saves ROOT/checkpoint-<step>/
(model, optimizer, LR scheduler, and every random state the loop draws
from: torch's global generator for dropout, the data generator for the
noise, Python's random for the batch indices) and, with --commit, commits
it with ckptsync.commit(..., wait="durable") (PYTHONPATH and
CKPTSYNC_SOCKET come from the caller).

--no-rng resumes model and optimizer but not the random states: the
control run that shows the comparison would catch a lost RNG state.
"""

import argparse
import json
import os
import random
import sys

import torch

DATA_SEED = 1234      # the fixed data set
NOISE_SEED = 99       # the data generator drawn from every step
TORCH_SEED = 7        # global generator: init weights, dropout
PY_SEED = 42          # python random: batch indices
N_SAMPLES, N_IN, BATCH = 512, 32, 32


def setup():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    torch.manual_seed(TORCH_SEED)
    random.seed(PY_SEED)


def dataset():
    g = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(N_SAMPLES, N_IN, generator=g)
    w = torch.randn(N_IN, 1, generator=g)
    y = torch.sin(x @ w / N_IN ** 0.5) + 0.1 * x[:, :1] ** 2
    return x, y


def model_and_opt():
    model = torch.nn.Sequential(
        torch.nn.Linear(N_IN, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(128, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=15, gamma=0.5)
    return model, opt, sched


def save(path, step, model, opt, sched, noise_gen):
    os.makedirs(path)
    torch.save(model.state_dict(), os.path.join(path, "model.pt"))
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()},
               os.path.join(path, "optimizer.pt"))
    torch.save({"torch": torch.get_rng_state(), "noise": noise_gen.get_state(),
                "python": random.getstate()}, os.path.join(path, "rng_state.pt"))
    with open(os.path.join(path, "meta.json"), "w") as f:
        json.dump({"step": step}, f)
        f.flush()
        os.fsync(f.fileno())


def load(path, model, opt, sched, noise_gen, with_rng):
    model.load_state_dict(torch.load(os.path.join(path, "model.pt")))
    o = torch.load(os.path.join(path, "optimizer.pt"))
    opt.load_state_dict(o["optimizer"])
    sched.load_state_dict(o["scheduler"])
    if with_rng:
        r = torch.load(os.path.join(path, "rng_state.pt"))
        torch.set_rng_state(r["torch"])
        noise_gen.set_state(r["noise"])
        random.setstate(r["python"])
    with open(os.path.join(path, "meta.json")) as f:
        return json.load(f)["step"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--resume")
    ap.add_argument("--no-rng", action="store_true")
    ap.add_argument("--ckpt-root")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--commit", action="store_true")
    ap.add_argument("--losses", required=True)
    a = ap.parse_args()

    setup()
    x, y = dataset()
    model, opt, sched = model_and_opt()
    noise_gen = torch.Generator().manual_seed(NOISE_SEED)
    start = 0
    if a.resume:
        start = load(a.resume, model, opt, sched, noise_gen, not a.no_rng)
    if a.commit:
        import ckptsync  # PYTHONPATH=client/python

    model.train()
    with open(a.losses, "a") as out:
        for step in range(start + 1, a.steps + 1):
            idx = torch.tensor(random.sample(range(N_SAMPLES), BATCH))
            xb = x[idx] + 0.05 * torch.randn(BATCH, N_IN, generator=noise_gen)
            loss = torch.nn.functional.mse_loss(model(xb), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            out.write("%d %s\n" % (step, float(loss.item()).hex()))
            out.flush()
            if a.ckpt_root and step % a.every == 0:
                path = os.path.join(a.ckpt_root, "checkpoint-%d" % step)
                save(path, step, model, opt, sched, noise_gen)
                if a.commit:
                    r = ckptsync.commit(path, step=step, wait="durable", timeout=60)
                    print("committed %s: %s" % (path, json.dumps(r, sort_keys=True)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

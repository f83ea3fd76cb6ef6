#!/usr/bin/env python3
"""Writes Hugging Face Trainer-style checkpoints the way the Trainer does.

checkpoint-N/ gets its weight and optimizer files first and
trainer_state.json last; older checkpoints are deleted beyond
--save-total-limit, as save_total_limit does.  Half of the weight tensors
stay equal from one checkpoint to the next (frozen layers), so dedup has
something to find.  For every checkpoint the sha256 of each file is
recorded in OUT/checkpoint-N.sums at the moment it is complete, so a test
can later check any restored copy against what was really written.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import time


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("out")
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--mib", type=int, default=8)
    ap.add_argument("--save-total-limit", type=int, default=2)
    ap.add_argument("--pause", type=float, default=0.5)
    a = ap.parse_args()
    os.makedirs(a.run_dir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(1234)
    tensors = [rng.randbytes(a.mib << 20 >> 3) for _ in range(8)]
    kept = []
    for i in range(1, a.checkpoints + 1):
        step = i * a.every
        for k in range(0, 8, 2):  # half the tensors change every step
            tensors[k] = rng.randbytes(len(tensors[k]))
        ck = os.path.join(a.run_dir, f"checkpoint-{step}")
        os.makedirs(ck)
        write(os.path.join(ck, "model.safetensors"), b"".join(tensors))
        write(os.path.join(ck, "optimizer.pt"), rng.randbytes(a.mib << 20 >> 2))
        write(os.path.join(ck, "config.json"), json.dumps({"hidden": 64}).encode())
        write(os.path.join(ck, "trainer_state.json"), json.dumps({"global_step": step}).encode())
        with open(os.path.join(a.out, f"checkpoint-{step}.sums"), "w") as f:
            for name in sorted(os.listdir(ck)):
                h = hashlib.sha256(open(os.path.join(ck, name), "rb").read()).hexdigest()
                f.write(f"{h}  ./{name}\n")
        with open(os.path.join(a.run_dir, "train.log"), "a") as log:
            log.write(f"step {step} loss {1.0 / step:.6f}\n")
        kept.append(ck)
        while len(kept) > a.save_total_limit:
            shutil.rmtree(kept.pop(0))
        time.sleep(a.pause)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""delta_train.py OUT_DIR STEP... — trains a small GPT-2-style model with
Debian's torch, mixed-precision style, and saves the checkpoints of the
given steps for tests/bench/delta-ratio.sh.

Each OUT_DIR/ckpt-<step>.bin is what a mixed-precision trainer saves, as
one raw concatenation (so the bench needs no torch-zip reader): the bf16
weights (every parameter, the cast of its fp32 master with
.to(torch.bfloat16), as trainers make the weights they save), then the
fp32 master weights, then AdamW's exp_avg, then exp_avg_sq, each part in
parameter order, little endian.  OUT_DIR/index.txt says where each tensor
is, one line per tensor, the same for every step:
    PART NAME OFFSET NBYTES
with PART bf16, master, adam (exp_avg and exp_avg_sq both).

The model: token and position embeddings, LAYERS pre-LN blocks (causal
self-attention with a fused qkv projection, a 4x GELU MLP), a final LN, the
LM head tied to the token embedding; parameters named as GPT-2's.  Data:
the text of the Python standard library's sources, words hashed into
VOCAB ids.  AdamW (betas 0.9, 0.95, weight decay 0.1 on matrices), lr
warmup over WARMUP steps to LR, then cosine decay over 10 x the run (so
the saved steps are taken near the peak rate: the hardest case for
deltas).  The forward runs in fp32 on the master weights (a CPU has no
fast bf16 matmul); the optimizer state and the master are what a bf16
mixed-precision run keeps.

Environment (defaults): D=256 LAYERS=4 HEADS=4 VOCAB=16384 CTX=64 BATCH=4
LR=6e-4 WARMUP=50 SEED=1 THREADS=1.
"""
import glob
import math
import os
import re
import sys
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F


def env(name, default):
    return type(default)(os.environ.get(name, default))


D, LAYERS, HEADS = env("D", 256), env("LAYERS", 4), env("HEADS", 4)
VOCAB, CTX, BATCH = env("VOCAB", 16384), env("CTX", 64), env("BATCH", 4)
LR, WARMUP, SEED = env("LR", 6e-4), env("WARMUP", 50), env("SEED", 1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(D, 3 * D)
        self.attn.c_proj = nn.Linear(D, D)
        self.ln_2 = nn.LayerNorm(D)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(D, 4 * D)
        self.mlp.c_proj = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, D)
        x = x + self.attn.c_proj(y)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(CTX, D)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if n.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def corpus():
    files = sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True))
    words = []
    for f in files:
        with open(f, errors="replace") as fh:
            words += re.findall(r"\w+|[^\w\s]", fh.read())
        if len(words) > 1_000_000:
            break
    ids = [zlib.crc32(w.encode()) % VOCAB for w in words]
    return torch.tensor(ids, dtype=torch.long)


def lr_at(step, total):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    frac = (step - WARMUP) / max(1, 10 * total)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def save(path, index_path, model, opt):
    params = list(model.named_parameters())
    parts = [("bf16", [(n, p.detach().to(torch.bfloat16)) for n, p in params]),
             ("master", [(n, p.detach()) for n, p in params]),
             ("adam", [(n + ".exp_avg", opt.state[p]["exp_avg"]) for n, p in params] +
              [(n + ".exp_avg_sq", opt.state[p]["exp_avg_sq"]) for n, p in params])]
    off, lines = 0, []
    with open(path + ".tmp", "wb") as f:
        for part, tensors in parts:
            for n, t in tensors:
                t = t.contiguous()
                b = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
                f.write(b)
                lines.append("%s %s %d %d\n" % (part, n, off, len(b)))
                off += len(b)
    os.rename(path + ".tmp", path)
    with open(index_path, "w") as f:
        f.writelines(lines)


def main(argv):
    out, steps = argv[1], sorted(int(s) for s in argv[2:])
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(SEED)
    torch.set_num_threads(env("THREADS", 1))
    data = corpus()
    model = GPT()
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(SEED)
    nparams = sum(p.numel() for p in model.parameters())
    print("params %d, checkpoint %.1f MB" % (nparams, nparams * 14 / 1e6), flush=True)
    for step in range(1, steps[-1] + 1):
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, steps[-1])
        ix = torch.randint(0, len(data) - CTX - 1, (BATCH,), generator=g)
        x = torch.stack([data[i:i + CTX] for i in ix])
        y = torch.stack([data[i + 1:i + CTX + 1] for i in ix])
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 20 == 0:
            print("step %d loss %.3f" % (step, loss.item()), flush=True)
        if step in steps:
            save(os.path.join(out, "ckpt-%d.bin" % step), os.path.join(out, "index.txt"),
                 model, opt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

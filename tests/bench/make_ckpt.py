#!/usr/bin/python3
"""make_ckpt.py — a realistic training checkpoint written with PyTorch.

    make_ckpt.py OUT_DIR SIZE_MIB [--successor OF_DIR] [--seed N]

Writes OUT_DIR/{model.safetensors-like torch file, optimizer.pt,
trainer_state.json}: bf16 weights (what a trainer saves for inference),
fp32 master weights and fp32 Adam moments (exp_avg, exp_avg_sq) in the
optimizer file, as mixed-precision training keeps them.  SIZE_MIB is the
total size; the split is the real one of bf16+fp32 Adam training (2 bytes
of weights + 12 bytes of optimizer state per parameter).

Values follow what training produces, not uniform noise: weights are
normal with a per-layer scale, the first moment small and centred, the
second moment positive and tiny, so the exponent bytes carry the same
little structure real ones do.

--successor OF_DIR writes a fine-tune successor of OF_DIR: the same
tensors, with one layer in ten changed (weights moved a little, their
optimizer state rewritten) and the rest bit-identical.
"""
import json
import os
import sys

import torch


def layer_tensors(gen, i, params):
    scale = 0.02 / (1 + (i % 7) * 0.1)
    w = torch.randn(params, generator=gen, dtype=torch.float32) * scale
    m = torch.randn(params, generator=gen, dtype=torch.float32) * 1e-4
    v = (torch.randn(params, generator=gen, dtype=torch.float32) * 1e-4) ** 2 + 1e-10
    return w, m, v


def main(argv):
    args = list(argv[1:])
    succ = None
    seed = 1
    if "--successor" in args:
        k = args.index("--successor")
        succ = args[k + 1]
        del args[k:k + 2]
    if "--seed" in args:
        k = args.index("--seed")
        seed = int(args[k + 1])
        del args[k:k + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, size_mib = args[0], int(args[1])
    os.makedirs(out, exist_ok=True)
    params_total = size_mib * 1024 * 1024 // 14
    nlayers = 40
    per = params_total // nlayers
    gen = torch.Generator().manual_seed(seed)
    if succ:
        model = torch.load(os.path.join(succ, "pytorch_model.bin"))
        opt = torch.load(os.path.join(succ, "optimizer.pt"))
        gen2 = torch.Generator().manual_seed(seed + 1000)
        for i in range(0, nlayers, 10):
            name = "layers.%d.weight" % i
            w, m, v = layer_tensors(gen2, i + 1000, per)
            master = opt["master"][name] + w * 0.01
            opt["master"][name] = master
            opt["exp_avg"][name] = m
            opt["exp_avg_sq"][name] = v
            model[name] = master.to(torch.bfloat16)
        step = opt["step"] + 100
        opt["step"] = step
    else:
        model, opt = {}, {"master": {}, "exp_avg": {}, "exp_avg_sq": {}, "step": 100}
        for i in range(nlayers):
            name = "layers.%d.weight" % i
            w, m, v = layer_tensors(gen, i, per)
            model[name] = w.to(torch.bfloat16)
            opt["master"][name] = w
            opt["exp_avg"][name] = m
            opt["exp_avg_sq"][name] = v
        step = 100
    torch.save(model, os.path.join(out, "pytorch_model.bin"))
    torch.save(opt, os.path.join(out, "optimizer.pt"))
    with open(os.path.join(out, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step, "log_history": [{"step": step, "loss": 1.0 / step}]}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

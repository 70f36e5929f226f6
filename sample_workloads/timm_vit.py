"""A timm Vision Transformer forward (random weights: ``pretrained=False``, nothing downloaded).

``timm.create_model("vit_small_patch16_224", pretrained=False)`` in eval mode, cast to
``-- --dtype`` (bf16 by default, or fp32), on a batch of ``-- --batch`` (8) random 224x224 images,
under ``no_grad``: 12 blocks of attention (timm's fused SDPA) and MLP, about 15 kernels a block.
"""

import argparse
import sys

import torch


def setup():
    import timm

    p = argparse.ArgumentParser()
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--batch", type=int, default=8)
    a = p.parse_args(sys.argv[1:])
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = timm.create_model("vit_small_patch16_224", pretrained=False).to("cuda", dtype).eval()
    x = torch.randn(a.batch, 3, 224, 224, device="cuda", dtype=dtype)

    @torch.no_grad()
    def step():
        return m(x)

    return step

"""A Hugging Face GPT-2 forward of one token per sequence (random weights, nothing downloaded).

``transformers``' ``GPT2LMHeadModel`` from a small ``GPT2Config`` (512 wide, 4 layers, 8 heads; the
other fields the config's defaults), in eval mode, cast to ``-- --dtype`` (bf16 by default, or
fp32). The step: ``m(input_ids, position_ids=..., use_cache=False)`` under ``no_grad`` for a batch
of 4 one-token sequences (a decode step's shape without its cache; ``gpt2_decode.py`` is GPT-2
small with a static KV cache, module by module).
"""

import argparse
import sys

import torch


def setup():
    from transformers import GPT2Config, GPT2LMHeadModel

    p = argparse.ArgumentParser()
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--batch", type=int, default=4)
    a = p.parse_args(sys.argv[1:])
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=512, n_layer=4, n_head=8)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = GPT2LMHeadModel(cfg).to("cuda", dtype).eval()
    ids = torch.randint(0, cfg.vocab_size, (a.batch, 1), device="cuda")
    pos = torch.full((a.batch, 1), 7, dtype=torch.long, device="cuda")

    @torch.no_grad()
    def step():
        return m(ids, position_ids=pos, use_cache=False).logits

    return step

"""A Hugging Face GPT-2 decode step with a static KV cache (random weights, nothing downloaded).

The model is transformers' ``GPT2LMHeadModel`` built from ``GPT2Config()`` (GPT-2 small: 12 layers,
768 wide, 12 heads). The decode step runs its modules (``ln_1``, ``attn.c_attn``, ``attn.c_proj``,
``mlp``, ``ln_f``, ``lm_head``) over a static KV cache held in preallocated tensors, as vLLM-style
servers do: the token's position is a GPU tensor, K/V are written with ``index_copy_`` and the
attention mask is computed on the GPU, so no Python-side state changes between calls and one
captured graph serves every step. (HF's own StaticCache path keeps Python-side state that a
graph bakes in: cgtool's replay check reports it as a mismatch.)

Graph: per layer about 25 kernels in one chain (LayerNorm, QKV GEMM, two cache writes, attention,
output GEMM, residual add, LayerNorm, MLP GEMMs with GELU, residual add), then the final LayerNorm
and the LM head: about 300 kernel nodes, one stream deep.
"""

import torch
import torch.nn.functional as F


def setup():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).cuda().eval()
    B, P, L = 4, 32, 128  # batch, prompt length, cache length
    H, D = cfg.n_head, cfg.n_embd // cfg.n_head
    blocks = model.transformer.h
    kcache = [torch.zeros(B, H, L, D, device="cuda") for _ in blocks]
    vcache = [torch.zeros(B, H, L, D, device="cuda") for _ in blocks]
    # Fill the first P positions as a prefill would.
    for k, v in zip(kcache, vcache):
        k[:, :, :P].normal_()
        v[:, :, :P].normal_()
    tok = torch.randint(0, cfg.vocab_size, (B, 1), device="cuda")
    pos = torch.tensor([P], device="cuda")
    slots = torch.arange(L, device="cuda")

    @torch.no_grad()
    def step():
        x = model.transformer.wte(tok) + model.transformer.wpe(pos)[None]
        mask = (slots <= pos)[None, None, None, :]  # attend to positions 0..pos
        for blk, kc, vc in zip(blocks, kcache, vcache):
            h = blk.ln_1(x)
            q, k, v = blk.attn.c_attn(h).split(cfg.n_embd, dim=2)
            q, k, v = (t.view(B, 1, H, D).transpose(1, 2) for t in (q, k, v))
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
            a = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
            x = x + blk.attn.c_proj(a.transpose(1, 2).reshape(B, 1, cfg.n_embd))
            x = x + blk.mlp(blk.ln_2(x))
        return model.lm_head(model.transformer.ln_f(x))

    return step

"""A transformer-like block on two streams (parallel attention and MLP, as in GPT-J / PaLM).

Graph: a LayerNorm, then two independent branches — attention (QKV projection, scaled dot-product
attention, output projection) on one stream and the MLP (two linears with GELU) on another — joined
by the residual add. Within each branch the kernels form a chain; between branches there are no
edges, so the two branches may overlap on the GPU.
"""

import torch
import torch.nn.functional as F


def setup():
    torch.manual_seed(0)
    B, T, D, H = 8, 128, 512, 8
    dev = "cuda"
    x = torch.randn(B, T, D, device=dev)
    ln = torch.nn.LayerNorm(D, device=dev)
    qkv = torch.nn.Linear(D, 3 * D, device=dev)
    proj = torch.nn.Linear(D, D, device=dev)
    fc1 = torch.nn.Linear(D, 4 * D, device=dev)
    fc2 = torch.nn.Linear(4 * D, D, device=dev)
    s_attn, s_mlp = torch.cuda.Stream(), torch.cuda.Stream()

    @torch.no_grad()
    def step():
        cur = torch.cuda.current_stream()
        h = ln(x)
        s_attn.wait_stream(cur)
        s_mlp.wait_stream(cur)
        with torch.cuda.stream(s_attn):
            q, k, v = qkv(h).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = proj(a.transpose(1, 2).reshape(B, T, D))
        with torch.cuda.stream(s_mlp):
            m = fc2(F.gelu(fc1(h)))
        cur.wait_stream(s_attn)
        cur.wait_stream(s_mlp)
        return x + a + m

    return step

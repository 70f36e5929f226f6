"""Captures two graphs (the second inside a record_function range), replays them, then dies with an
exception (exit code 1)."""
import json

import torch


def main() -> None:
    x = torch.randn(64, 64, device="cuda")
    torch.mm(x, x)
    torch.cuda.synchronize()
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):
        y = torch.mm(x, x).relu()  # LINE_G1
    with torch.cuda.graph(g2):
        with torch.profiler.record_function("second_graph"):  # names the nodes made inside it
            z = (y * 2).sum()  # LINE_G2
    for _ in range(3):
        g1.replay()
    for _ in range(5):
        g2.replay()
    torch.cuda.synchronize()
    print("RESULT " + json.dumps({"replays": [3, 5]}), flush=True)
    raise RuntimeError("deliberate crash after the second graph")


if __name__ == "__main__":
    main()

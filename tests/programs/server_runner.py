"""A vLLM/SGLang-style runner: one CUDA graph per batch size (1, 2, 4, 8) in one shared pool, then serving."""
import json
import sys
import time

import torch

LAYERS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
SERVE_S = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0  # serve the requests again until this long
HIDDEN = 256
BATCH_SIZES = [8, 4, 2, 1]  # captured largest first, as servers do, so smaller ones reuse the pool
REQUESTS = [3, 1, 8, 5, 2, 7, 4, 1, 1, 6, 2, 8, 3, 1, 2]  # incoming batch sizes, padded to a captured size


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(HIDDEN)
        self.up = torch.nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = torch.nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        h = torch.nn.functional.gelu(self.up(h))  # LINE_GELU
        return x + self.down(h)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x.softmax(-1)  # LINE_SOFTMAX


def main() -> None:
    t_start = time.perf_counter()
    torch.manual_seed(0)
    model = Model().cuda().eval()
    static_in = {bs: torch.zeros(bs, HIDDEN, device="cuda") for bs in BATCH_SIZES}
    graphs: dict[int, torch.cuda.CUDAGraph] = {}
    static_out: dict[int, torch.Tensor] = {}
    pool = torch.cuda.graph_pool_handle()
    capture_s, reserved_in_capture = [], []
    with torch.no_grad():
        for bs in BATCH_SIZES:  # warm up eagerly on a side stream, as torch.cuda.graph's docs ask
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                model(static_in[bs])
            torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        for bs in BATCH_SIZES:
            g = torch.cuda.CUDAGraph()
            t0 = time.perf_counter()
            with torch.cuda.graph(g, pool=pool):  # LINE_CAPTURE
                r0 = torch.cuda.memory_reserved()  # host-side statistics: allowed while capturing
                static_out[bs] = model(static_in[bs])
                reserved_in_capture.append(torch.cuda.memory_reserved() - r0)
            torch.cuda.synchronize()
            capture_s.append(time.perf_counter() - t0)
            graphs[bs] = g
        replays = {bs: 0 for bs in BATCH_SIZES}
        t_serve = time.perf_counter()
        while True:
            for n in REQUESTS:
                bs = min(b for b in BATCH_SIZES if b >= n)
                static_in[bs][:n].normal_()
                graphs[bs].replay()
                replays[bs] += 1
            torch.cuda.synchronize()
            if time.perf_counter() - t_serve >= SERVE_S:
                break
    print("RESULT " + json.dumps({"batch_sizes": BATCH_SIZES, "replays": replays, "capture_s": capture_s,
                                  "reserved_in_capture": reserved_in_capture,
                                  "wall_s": time.perf_counter() - t_start}))


if __name__ == "__main__":
    main()

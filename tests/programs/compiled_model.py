"""A model under torch.compile(mode="reduce-overhead"): cudagraph trees record one graph per input shape.

More compiled functions: one mutates its input (torch skips cudagraphs, says why), one mixes CPU work.
"""
import json
import time

import torch

SHAPES = [(8, 10), (16, 6)]  # (batch, steps): a new shape makes cudagraph trees record a new graph


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(128, 256)
        self.fc2 = torch.nn.Linear(256, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(x))).softmax(-1)


def mutates_input(a: torch.Tensor) -> torch.Tensor:
    a.add_(1)  # an in-place update of an input: cudagraph trees will not graph this
    return a.sin()


def cpu_and_gpu(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return a.sin(), b.cos()  # b lives on the CPU: a graph with CPU work is not cudagraphed


def main() -> None:
    t_start = time.perf_counter()
    torch.manual_seed(0)
    model = torch.compile(MLP().cuda(), mode="reduce-overhead")
    calls = 0
    with torch.no_grad():
        for batch, steps in SHAPES:
            x = torch.randn(batch, 128, device="cuda")
            for _ in range(steps):
                model(x)  # LINE_CALL
                calls += 1
    skipped = torch.compile(mutates_input, mode="reduce-overhead")
    for _ in range(3):
        skipped(torch.randn(8, device="cuda"))
    mixed = torch.compile(cpu_and_gpu, mode="reduce-overhead")
    for _ in range(3):
        mixed(torch.randn(8, device="cuda"), torch.randn(8))
    torch.cuda.synchronize()
    print("RESULT " + json.dumps({"shapes": SHAPES, "calls": calls, "wall_s": time.perf_counter() - t_start}))


if __name__ == "__main__":
    main()

"""torch.compile(mode="reduce-overhead") called with changing shapes: CUDA graph trees record a new
graph for each new shape at the same call site (re-recording), and replay the ones seen before."""
import torch

import _graphcount

BATCHES = [4, 4, 4, 8, 8, 8, 4, 16, 16, 16, 8, 4]


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


if __name__ == "__main__":
    _graphcount.install()
    torch.manual_seed(0)
    model = torch.compile(MLP().cuda(), mode="reduce-overhead")
    with torch.no_grad():
        for b in BATCHES:
            model(torch.randn(b, 64, device="cuda"))  # LINE_CALL
    torch.cuda.synchronize()
    _graphcount.result(batches=BATCHES, distinct=sorted(set(BATCHES)))

"""torch.compile(mode="reduce-overhead"): CUDA graph trees copy each call's inputs into their own
pool, manage the outputs there (a later replay overwrites them) and read the parameters as static
inputs. Inputs die every call, outputs are reused: a checker must report nothing."""
import torch

import _graphcount


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(256, 512)
        self.down = torch.nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


if __name__ == "__main__":
    _graphcount.install()
    torch.manual_seed(0)
    model = torch.compile(MLP().cuda(), mode="reduce-overhead")
    outs = []
    with torch.no_grad():
        for step in range(30):
            b = 8 if step % 3 else 16
            y = model(torch.randn(b, 256, device="cuda"))  # LINE_CALL
            outs.append(y.sum().item())
    torch.cuda.synchronize()
    _graphcount.result(steps=30)

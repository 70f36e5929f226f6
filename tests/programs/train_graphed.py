"""A training loop with torch.cuda.make_graphed_callables: a forward and a backward graph, replayed each step."""
import json
import time

import torch

STEPS = 12


def main() -> None:
    t_start = time.perf_counter()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 128, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")
    graphed = torch.cuda.make_graphed_callables(model, (x,))  # LINE_GRAPHED
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        out = graphed(x)  # LINE_FORWARD
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()  # LINE_BACKWARD
        opt.step()
        losses.append(float(loss))
    print("RESULT " + json.dumps({"steps": STEPS, "losses": losses, "wall_s": time.perf_counter() - t_start}))


if __name__ == "__main__":
    main()

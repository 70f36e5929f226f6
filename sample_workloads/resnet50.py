"""torchvision's ResNet-50 forward (inference), built from its config with random weights.

Graph: a long chain of convolution, batch-norm (folded into cuDNN/implicit-GEMM kernels or separate
elementwise kernels) and ReLU kernels, with the residual adds; the skip connections make short
forks and joins inside each bottleneck block, but the graph is essentially one stream deep.
Batch 32 at 224x224, fp32 with TF32 off so replay and eager agree closely.
"""

import torch


def setup():
    import torchvision

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = torchvision.models.resnet50(weights=None).cuda().eval()
    x = torch.randn(32, 3, 224, 224, device="cuda")

    @torch.no_grad()
    def step():
        return model(x)

    return step

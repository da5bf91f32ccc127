"""The model and one training step. `build` runs once per process and returns the state;
`step` trains on one batch (gradient accumulation through ctx.boundary)."""

import torch

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


class SmallNet(torch.nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 5, stride=4, padding=2), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x))


def build(ctx):
    device = ctx.device
    model = SmallNet().to(device)
    if ctx.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return {"model": model, "opt": opt, "ctx": ctx, "mean": MEAN.to(device), "std": STD.to(device)}


def step(state, batch):
    images, labels = batch[0], batch[1]
    ctx = state["ctx"]
    images = images.to(ctx.device, non_blocking=True).float().sub_(state["mean"]).div_(state["std"])
    labels = labels.to(ctx.device, non_blocking=True) % 10
    loss = torch.nn.functional.cross_entropy(state["model"](images), labels) / ctx.grad_accum
    loss.backward()
    if ctx.boundary:
        state["opt"].step()
        state["opt"].zero_grad(set_to_none=True)
    return loss

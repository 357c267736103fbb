"""A LeNet-5-style CNN whose layer sizes adapt to the input image size."""

from __future__ import annotations

import torch
from torch import nn

from trainscope.config import gib, memory_budget_bytes
from trainscope.errors import ConfigError


class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al., 1998) with today's usual ReLU and max-pooling.

    Two conv blocks (6 and 16 channels) and a 120-84-classes head. On 28x28 MNIST it is the
    classic shape (5x5 kernels, 400 features into the head). Small images (under 20 px,
    such as the 8x8 digits) get 3x3 kernels padded to keep their size, so two poolings
    still leave a map to classify. ``blocks`` lists the units that later features
    (activation checkpointing, FSDP wrapping) target.
    """

    def __init__(
        self, in_channels: int = 1, image_size: int | tuple[int, int] = 28, num_classes: int = 10
    ) -> None:
        super().__init__()
        h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
        small = min(h, w) < 20
        k = 3 if small else 5
        conv1 = nn.Sequential(
            nn.Conv2d(in_channels, 6, k, padding=k // 2), nn.ReLU(), nn.MaxPool2d(2)
        )
        conv2 = nn.Sequential(
            nn.Conv2d(6, 16, k, padding=k // 2 if small else 0), nn.ReLU(), nn.MaxPool2d(2)
        )
        # Size the head by arithmetic, not by a dummy forward: a forward pass would
        # allocate the activations of a whole image, which for an absurd size is the
        # failure itself. Both convs keep the size when small (odd k, padding k // 2);
        # otherwise conv2 trims k - 1; each pooling halves, rounding down.
        fh, fw = ((n // 2 if small else n // 2 - k + 1) // 2 for n in (h, w))
        if min(h, w) < 1 or min(fh, fw) < 1:
            raise ConfigError(f"image size {h}x{w} is too small for LeNet5 (min 4x4)")
        features = 16 * fh * fw
        # The head's first layer grows with the image area: refuse a size whose weights
        # cannot fit in host memory rather than fail allocating them.
        n_params = features * 120 + 120 * 84 + 84 * num_classes
        if 4 * n_params > memory_budget_bytes():
            raise ConfigError(
                f"image size {h}x{w} with {num_classes} classes gives LeNet5 "
                f"{n_params:.3g} parameters ({gib(4 * n_params)}), more than the "
                f"{gib(memory_budget_bytes())} allowed (half of this machine's memory)"
            )
        head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(features, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, num_classes),
        )
        # The only registration of the layers: one name per parameter, so state dicts and
        # safetensors files carry no aliased tensors.
        self.blocks = nn.ModuleList([conv1, conv2, head])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of images (N, C, H, W)."""
        for block in self.blocks:
            x = block(x)
        return x

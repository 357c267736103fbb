"""The fast affine grid equals torch's affine_grid."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainscope.data.augment import RandomAffine, affine_grid


@pytest.mark.parametrize("shape", [(5, 28, 28), (3, 8, 8), (2, 7, 12)])
def test_matches_torch_affine_grid(shape: tuple[int, int, int]) -> None:
    n, h, w = shape
    theta = RandomAffine(30.0, 0.2, (0.7, 1.3)).matrices(n, torch.Generator().manual_seed(1))
    want = F.affine_grid(theta, [n, 1, h, w], align_corners=False)
    torch.testing.assert_close(affine_grid(theta, h, w), want, atol=1e-6, rtol=0)


def test_identity_matrix_leaves_images_unchanged() -> None:
    x = torch.rand(4, 1, 9, 11)
    same = RandomAffine(0.0, 0.0, (1.0, 1.0))(x, torch.Generator().manual_seed(0))
    torch.testing.assert_close(same, x, atol=1e-5, rtol=0)

"""benchmarks/sac_ae.py compares the model's matmul convolutions with XLA's: the three
formulations must compute the same thing."""

import jax
import numpy as np
import pytest

from lab.models import conv as convs
from tests.conftest import load_benchmark


def _benchmark():
    return load_benchmark("sac_ae")


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("stride", [1, 2])
def test_lax_formulations_equal_the_matmul_convolutions(layout, stride):
    bench = _benchmark()
    k_x, k_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(k_x, (17, 16, 5))
    w = jax.random.normal(k_w, (3, 3, 5, 4))
    np.testing.assert_allclose(bench.lax_conv2d(layout)(x, w, stride),
                               convs.conv2d(x, w, stride), rtol=1e-4, atol=1e-4)
    y = convs.conv2d(x, w, stride)
    pad = (0, 1) if stride == 2 else 0
    np.testing.assert_allclose(
        bench.lax_conv_transpose2d(layout)(y, np.swapaxes(w, 2, 3), stride, pad),
        convs.conv_transpose2d(y, np.swapaxes(w, 2, 3), stride, pad), rtol=1e-4, atol=1e-4)
    bench.use("matmul")
    assert convs.conv2d is bench.FORMULATIONS["matmul"][0]

import pytest
import torch
import torch.nn.functional as F

from . import base, consts


def rms_norm_fused(x, shape, weight, bias, eps):
    return F.rms_norm(x, shape, weight, eps)


def rms_norm_decomposed(x, shape, weight, bias, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@pytest.mark.rms_norm
def test_rms_norm():
    bench = base.NormBenchmark(
        op_name="rms_norm", torch_op=rms_norm_fused, gems_op=rms_norm_decomposed,
        dtypes=consts.FLOAT_DTYPES,
    )
    bench.run()

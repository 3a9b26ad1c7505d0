"""Examples for bench/bench_check_overhead.py: tokamax's linear softmax cross-entropy kernel
(Pallas Mosaic TPU, tokamax 0.0.12: its later versions build it with pl.kernel, which vmem-lsp
does not reach), forward and forward+backward, called as its pallas_mosaic_tpu_test.py calls it
(the large case). Needs a Python with tokamax==0.0.12 (--python)."""

import jax
from tokamax._src.ops.linear_softmax_cross_entropy_loss import pallas_mosaic_tpu

LOSS = pallas_mosaic_tpu.PallasMosaicTpuLinearSoftmaxCrossEntropyLoss()


# vmem: forward(f32[16384, 4096], s32[16384], f32[4096, 16384])
def forward(x, labels, w):
    return LOSS(x, labels, w, reduction="sum")


# vmem: forward_backward(f32[16384, 4096], s32[16384], f32[4096, 16384])
def forward_backward(x, labels, w):
    return jax.value_and_grad(LOSS, argnums=(0, 2))(x, labels, w, reduction="sum")

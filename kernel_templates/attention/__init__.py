"""Attention (forward) kernels: the SDPA backends and FlexAttention on the library side, the
Triton flash-attention and split-KV decode templates on the custom side (``backends.py``
registers them for the kind ``"attention"``)."""

"""Mixture-of-experts kernels: routing (top-k gating), token dispatch and combine."""

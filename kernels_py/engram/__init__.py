"""Engram conditional-memory kernels (DeepSeek Engram): the gated residual and its gradient."""

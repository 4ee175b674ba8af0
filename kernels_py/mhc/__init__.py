"""Manifold hyper-connection (mHC) kernels: Sinkhorn normalisation of the mixing matrices."""

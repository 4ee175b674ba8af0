"""Activation kernels (gated MLP activations for dense and MoE expert layers)."""

"""Channel-first implicit im2col (forward, weight-stationary)."""

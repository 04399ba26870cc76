"""BP-im2col: the NZ-detecting address generators and their input-stationary engine."""

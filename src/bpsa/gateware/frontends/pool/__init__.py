"""The pooling unit (im2col / col2im pooling, forward and backward)."""

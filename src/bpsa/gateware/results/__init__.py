"""Where results go: the partial-sum buffer P and the requantizer."""

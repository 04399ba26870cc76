"""The zero-free loss and gradient walkers: no inserted zero is read, sent or multiplied."""

"""The Fornt data feeder (forward): kernel-pattern shifters and feed lanes."""

"""Blocks every room uses: checked components, hardware enums, the skid buffer."""

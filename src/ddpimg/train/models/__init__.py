"""Models written here in plain torch (the others come from torchvision)."""

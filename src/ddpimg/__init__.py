"""ddpimg: resolve ranks and the site, then run PyTorch DDP / DeepSpeed trainers the same way
on any cluster. See README.md and DESIGN.md for the public interface."""

__version__ = "0.1.0"

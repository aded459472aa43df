"""``train mnist``'s defaults, which its spec (the package) and its task share: the
tutorial's Adadelta learning rate and per-epoch decay (mnist has no flags of its own).
Imports nothing."""

LEARNING_RATE = 1.0
LR_DECAY = 0.7

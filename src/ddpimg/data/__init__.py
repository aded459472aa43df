"""Datasets on storage and the tools that prepare them (``ddpimg data``): formats, their
indexes and the packing of an image tree into shards. Nothing here imports torch."""

"""What ddpimg knows about GPU hardware and the torch builds its images carry.

Pure: nothing here imports torch or probes a device.
"""

"""The hardware an image runs on: which torch builds exist (``builds``), whether this
machine's GPU and driver can run the build inside the image (``compat``), and which network
NCCL chose (``nccl_log``). The rules are pure functions; probing the GPU imports torch."""

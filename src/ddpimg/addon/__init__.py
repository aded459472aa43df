"""Add-ons: a user's own packages beside the image, never in it (docs/addons.md).

``ddpimg addon build`` locks a requirements file against the image's own packages and packs
what it adds as a squashfs (``build``); every runtime mounts it read-only at
``/opt/ddpimg/addons/NAME`` (``ddpimg.jobs.addons``), and the image's Python sees it after
its own packages (``sitepath``, the start-up hook); ``train`` and ``ddpimg doctor`` refuse
an add-on made for another package set before any rendezvous, and every run's manifest
records the add-ons it ran with (``mounted``).

    sitepath      the start-up hook and the package set's identity (standard library only)
    packageset    the running environment's package set
    requirements  a requirements file, checked against the image's packages
    lockfile      NAME.lock: the packages, their hashes, the package set
    pipcalls      pip: resolve, download, build, install
    sources       downloaded files, source distributions built into wheels
    tree          the add-on's tree: scripts, shadows, bytecode, permissions
    squashfs      packing it reproducibly
    metadata      addon.json inside the add-on
    build         the steps of ``ddpimg addon build``
    engine        ``--image``: the build run in an image from the host
    layered       ``ddpimg addon image``: Docker / podman images with add-on layers
    mounted       run time: the add-ons mounted here, checked and recorded
"""

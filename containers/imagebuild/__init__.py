"""How ddpimg's images are built from ``containers/``: what the image sessions of noxfile.py call.

    locks.py    the lock table (one lock per torch build, each flavour's default) and
                `nox -s lock`'s uv command
    context.py  the build context staged from the tree; revision, dates and version passed in
    wheels.py   the locked files fetched on this machine and served on 127.0.0.1 to a build
                without a registry (``--local``)
    aptlocks.py the Debian package locks, one per base (`nox -s lock -- apt`)
    images.py   one `docker build` (ImageBuild): its options, arguments and commands, the
                builds CI and the benchmarks make, the reproducibility check (image-repro)
    rootfs.py   an image's file system as one canonical tar, and its canonical config
    reproduce.py
                the built image rewritten as that one layer (docker export / import /
                load), and two images compared file by file
    engine.py   this machine's Docker engine (containers/engine.sh) and GPU
    squashfs.py `nox -s sqsh`: enroot's squashfs of an image, reproducibly
    sif.py      `nox -s sif`: a SIF from ddp.def or ddp-standalone.def
    session.py  what these functions need of a nox session

Every function works from the repository root, as nox sessions do; none imports nox, so
the pure parts are tested without it (tests/containers/test_imagebuild_*.py).
"""

#!/bin/sh
# The image's Python environment: a venv holding exactly one hashed lock file, then ddpimg.
# Run as root by containers/Dockerfile (build stage) and ddp-standalone.def.
#
#   install-python.sh deps LOCK    the venv with LOCK (containers/lock/NAME.txt) and nothing else
#   install-python.sh compile      the venv's bytecode, once everything of LOCK is in place
#                                  (after cpu-venv.sh, which patches a module)
#   install-python.sh ddpimg PKG ENTRYPOINTS
#                                  ddpimg from PKG (its wheel or source tree; no downloads),
#                                  and the image's commands from ENTRYPOINTS (entrypoints/)
#
# The same files, byte for byte, from every build of the same lock (docs/containers.md,
# "Locked and reproducible"):
#   - pip writes no bytecode (--no-compile); `compile` writes it once, hash-checked, in one
#     process (pycs.py says why each of those);
#   - DeepSpeed and mpi4py, the two packages built here, are built from their hashed source
#     archives unpacked at one fixed path (SOURCES), not in pip's randomly named temporary
#     directories, whose names the compiled objects' debug information would keep; the C/C++
#     compiler maps that path to "." (-ffile-prefix-map) besides;
#   - PYTHONHASHSEED=0: DeepSpeed's setup.py lists its "all" extra from a set, whose order
#     (and so the METADATA file's) follows the string hashes of the process;
#   - no host-CPU detection: the cpu flavour builds only DeepSpeed's shared-memory op, which
#     is compiled with -O2 -fopenmp alone (no -march=native; DS_CPU_OPS says why the others
#     are not built), and DS_BUILD_OPS=1 builds for TORCH_CUDA_ARCH_LIST, never for a GPU it
#     finds (a build has none);
#   - nothing of the build stays: the archives, the source trees, the wheels built from them
#     and pip's cache (--no-cache-dir) are under /tmp, which the image does not keep.
#
# Where pip finds the locked files; used during the build only, nothing of it stays in the
# image, and whatever the source, pip installs nothing whose hash is not in LOCK:
#   WHEELS_URL  a directory or URL holding the locked files (pip --no-index --find-links);
#               `nox -s image` serves one on 127.0.0.1 to `docker build --network host`
#   INDEX_URL   a package index to use instead of PyPI (a mirror)
#   EXTRA_CA    a PEM file of extra certificate authorities (a proxy's), added to the system's
# Build options (environment):
#   VENV                   where the venv goes (default /opt/ddpimg/venv)
#   MPI4PY_BUILD=source    compile mpi4py against the image's Open MPI (default), or
#               =wheel     install mpi4py's wheel, which loads that same libmpi at run time
#                          (ABI-compatible; saves ~3 CPU-minutes of compiling)
#   FLAVOUR=cpu            the cpu flavour, whose runtime has no compiler: DeepSpeed's CPU ops
#                          that a container would JIT-compile (DS_CPU_OPS) are built now
#                          (cpu-venv.sh then adjusts the venv)
#   DS_BUILD_OPS=1         pre-build DeepSpeed's ops: needs nvcc, i.e. a CUDA devel base
#   TORCH_CUDA_ARCH_LIST   the GPU architectures those ops are built for (a build has no GPU
#                          to detect them from)
#   CROSS_PLATFORM         empty: `deps` installs for the CPU it runs on (the default). A
#                          platform such as linux-aarch64: `deps` runs on another CPU, with the
#                          Python version of the image's (the Dockerfile's BUILD_FROM), and
#                          installs that platform's wheels at the speed of its own CPU (an
#                          emulated pip takes five times as long). Needs MPI4PY_BUILD=wheel and
#                          DS_BUILD_OPS=0: nothing can be compiled for the other CPU here.
set -eu

# The DeepSpeed ops the cpu flavour builds (their DS_BUILD_* switches): those its CPU
# accelerator JIT-compiles for `train --strategy deepspeed` at ZeRO stages 0-3 with the
# bundled trainers' optimizers, i.e. the shared-memory all-reduce alone (the optimizers are
# torch's own). Not cpu_adam, cpu_adagrad, cpu_lion or fused_adam (DeepSpeed's own CPU
# optimizers, e.g. ZeRO-Offload's): DeepSpeed compiles those with -march=native, for the
# build machine's CPU, so an image built with them could crash on another CPU.
DS_CPU_OPS="SHM_COMM"
usage="install-python.sh deps LOCK | compile | ddpimg PKG ENTRYPOINTS"
step=${1:?usage: $usage}
venv=${VENV:-/opt/ddpimg/venv}
pip="$venv/bin/python -m pip"
scripts=$(dirname "$0")
# Where the packages built here are unpacked and built: the same path in every build.
SOURCES=/tmp/ddpimg-build/sources
export PYTHONHASHSEED=0
# Built from source: DeepSpeed against this torch, mpi4py against this image's Open MPI.
case ${MPI4PY_BUILD:-source} in
source) from_source="deepspeed mpi4py" ;;
wheel) from_source="deepspeed" ;;
*)
    echo "install-python.sh: error: MPI4PY_BUILD='$MPI4PY_BUILD': expected source or wheel" >&2
    exit 2
    ;;
esac

die() {
    echo "install-python.sh: error: $1" >&2
    [ $# -lt 2 ] || echo "install-python.sh: hint: $2" >&2
    exit 1
}

install_deps() {
    lock=$1
    [ -f "$lock" ] || die "lock file $lock does not exist" \
        "make it with \`nox -s lock\` where its index is reachable, or choose another TORCH_SOURCE"
    if [ -n "${CROSS_PLATFORM:-}" ]; then
        [ "${MPI4PY_BUILD:-source}" = wheel ] || die "CROSS_PLATFORM=$CROSS_PLATFORM: mpi4py cannot be compiled for another CPU" \
            "pass MPI4PY_BUILD=wheel (its wheel loads the image's Open MPI at run time)"
        [ "${DS_BUILD_OPS:-0}" = 0 ] || die "CROSS_PLATFORM=$CROSS_PLATFORM: DeepSpeed's ops cannot be compiled for another CPU" \
            "build on a $CROSS_PLATFORM machine, or pass DS_BUILD_OPS=0"
        [ "${FLAVOUR:-gpu}" != cpu ] || die "CROSS_PLATFORM=$CROSS_PLATFORM: the cpu flavour builds DeepSpeed's CPU ops, which cannot be compiled for another CPU" \
            "build the cpu flavour on a $CROSS_PLATFORM machine"
    fi

    if [ "${DS_BUILD_OPS:-0}" = 1 ]; then
        command -v nvcc >/dev/null 2>&1 || die "DS_BUILD_OPS=1 needs nvcc, which this build stage lacks" \
            "build with --build-arg BUILD_FROM=<a CUDA devel image of the same OS as the base>"
        nvcc_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
        case ";${TORCH_CUDA_ARCH_LIST:-};" in
        *";7.0;"* | *";7.0+PTX;"*)
            [ "${nvcc_major:-0}" -lt 13 ] || die "CUDA $nvcc_major cannot build for V100 (sm 7.0), found in TORCH_CUDA_ARCH_LIST='$TORCH_CUDA_ARCH_LIST'" \
                "torch's CUDA 13 wheels do not run on V100 either: for V100 sites use the pypi-cu128 lock and a CUDA 12 devel base; otherwise pass TORCH_CUDA_ARCH_LIST='8.0;9.0+PTX'"
            ;;
        esac
    fi

    # Split LOCK into the wheels and the two packages built here. An entry starts at column 0
    # ("name==version ; marker \"); its hash and comment lines are indented below it.
    part() {
        awk -v want="$1" -v names=" $from_source " '
            /^#/ { next }
            /^[A-Za-z0-9]/ {
                name = tolower($1)
                sub(/[=;<>!~ ].*/, "", name)
                built = index(names, " " name " ") > 0
            }
            (want == "source") == built { print }
        ' "$lock"
    }
    work=$(mktemp -d)
    part binary >"$work/binary.txt"
    part source >"$work/source.txt"

    set -- --disable-pip-version-check --no-input --no-cache-dir --progress-bar off
    if [ -n "${WHEELS_URL:-}" ]; then
        set -- "$@" --no-index --find-links "$WHEELS_URL"
    elif [ -n "${INDEX_URL:-}" ]; then
        set -- "$@" --index-url "$INDEX_URL"
    fi
    if [ -n "${EXTRA_CA:-}" ] && [ -s "$EXTRA_CA" ]; then
        cat /etc/ssl/certs/ca-certificates.crt "$EXTRA_CA" >"$work/ca.pem"
        export PIP_CERT="$work/ca.pem"
    fi

    python3 -m venv "$venv"
    if [ "${FLAVOUR:-gpu}" = cpu ]; then
        # DeepSpeed's setup.py reads these: its CPU accelerator, whichever the build machine
        # has, and the ops to build (DS_BUILD_OPS=0 leaves every other op to JIT).
        export DS_ACCELERATOR=cpu
        for op in $DS_CPU_OPS; do export "DS_BUILD_$op=1"; done
    fi
    if [ -n "${CROSS_PLATFORM:-}" ]; then
        # sysconfig.get_platform(), and so pip's idea of which wheels fit, reads this variable:
        # CPython's own cross builds set it.
        _PYTHON_HOST_PLATFORM=$CROSS_PLATFORM \
            $pip install "$@" --require-hashes --no-deps --no-compile --only-binary :all: \
            -r "$work/binary.txt"
        # DeepSpeed (pure Python without pre-built ops) in an isolated build environment: its
        # setup.py imports torch where it can, and the venv's is for the other CPU. It then
        # records torch "0.0" for the pre-built ops it has none of (ds_report's "compiled w."
        # line), the one difference from a build on the image's own CPU.
        $pip install "$@" --require-hashes --no-deps --no-compile --use-pep517 \
            -r "$work/source.txt"
        rm -rf "$work"
        return
    fi
    $pip install "$@" --require-hashes --no-deps --no-compile --only-binary :all: \
        -r "$work/binary.txt"
    build_from_source "$@"
    rm -rf "$work"
}

# DeepSpeed (which has only a source distribution) and, with MPI4PY_BUILD=source, mpi4py:
# their hashed source archives unpacked under SOURCES and built there. No build isolation:
# their build tools (and torch, for DeepSpeed) come from the lock, already installed, instead
# of unhashed downloads.
build_from_source() {
    rm -rf "$SOURCES"
    mkdir -p "$SOURCES/archives" "$SOURCES/src" "$SOURCES/wheels"
    $pip download "$@" --require-hashes --no-deps --no-build-isolation --no-binary :all: \
        -r "$work/source.txt" -d "$SOURCES/archives"
    for archive in "$SOURCES"/archives/*; do
        tar -C "$SOURCES/src" -xf "$archive"
    done
    prefix_map="-ffile-prefix-map=$SOURCES/src=."
    for tree in "$SOURCES"/src/*/; do
        (cd "$tree" && CFLAGS="${CFLAGS:-} $prefix_map" CXXFLAGS="${CXXFLAGS:-} $prefix_map" \
            $pip wheel --disable-pip-version-check --no-input --no-cache-dir --progress-bar off \
            --no-deps --no-build-isolation --wheel-dir "$SOURCES/wheels" .)
    done
    # By name and version from the wheels just built (their hashes are not the archives':
    # those were checked above), so that pip records no path of this build (direct_url.json).
    awk '/^[A-Za-z0-9]/ { print $1 }' "$work/source.txt" >"$work/built.txt"
    $pip install --disable-pip-version-check --no-input --no-cache-dir --no-index \
        --find-links "$SOURCES/wheels" --no-deps --no-compile -r "$work/built.txt"
    rm -rf "$SOURCES"
}

compile_venv() {
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$venv/bin/python" "$scripts/pycs.py" compile "$site"
}

install_ddpimg() {
    package=$1
    entrypoints=${2:?usage: $usage}
    # The venv may come from a build stage of another CPU (CROSS_PLATFORM): its Python must
    # be this image's, whose site-packages directory and bytecode it was made for.
    made_by=$(sed -n 's/^version *= *//p' "$venv/pyvenv.cfg")
    here=$("$venv/bin/python" -c 'import platform; print(platform.python_version())')
    [ "$made_by" = "$here" ] || die "the venv was made by Python $made_by, this image has $here" \
        "build the venv (BUILD_FROM) on an image with the Python of the image's base"
    $pip install --disable-pip-version-check --no-input --no-cache-dir --no-deps \
        --no-build-isolation --no-index --no-compile "$package"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$venv/bin/python" "$scripts/pycs.py" compile "$site/ddpimg"
    # Every requirement of every installed package is in the lock.
    $pip check
    # The image's commands are entrypoints/{train,ddpimg} (python3 -I: a host PYTHONPATH cannot
    # shadow ddpimg), in place of the console scripts pip generated.
    for command in train ddpimg; do
        install -m 0755 "$entrypoints/$command" "$venv/bin/$command"
    done
    # Add-ons (docs/addons.md): mounted read-only under /opt/ddpimg/addons/NAME, and seen by
    # every Python of the image after the venv's own packages through a .pth start-up hook
    # (ddpimg/addon/sitepath.py says why a .pth file and not PYTHONPATH).
    mkdir -p /opt/ddpimg/addons
    "$venv/bin/python" -I -m ddpimg addon install-hook >/dev/null
    # Its module's bytecode now, hash-checked: else the next Python to start (the self-check)
    # imports it through the .pth and writes a timestamp-based pyc holding this build's time,
    # the one file that made two builds of one commit differ.
    "$venv/bin/python" "$scripts/pycs.py" compile "$site/_ddpimg_addons.py"
}

case $step in
deps) install_deps "${2:?usage: $usage}" ;;
compile) compile_venv ;;
ddpimg) install_ddpimg "${2:?usage: $usage}" "${3:-}" ;;
*) die "unknown step '$step'" "$usage" ;;
esac

#!/bin/sh
# The cpu flavour's venv, after `install-python.sh deps` (containers/Dockerfile, build stage):
#
#   cpu-venv.sh VENV
#
# 1. torchvision without its compiled ops, which need CUDA's torch (torchvision_cpu.py says
#    why and what stays);
# 2. without what torch's CPU wheel carries for building and testing torch itself, which the
#    cpu image, having no compiler, never uses: its C++ unit tests' executables (torch/test,
#    torch/bin/test_* and *StoreTest, about 120 MB) and the C++ headers for compiling
#    extensions (torch/include, 62 MB). torch/bin keeps torch_shm_manager (DataLoader's
#    shared memory). Without them the image is under the 2 GB a laptop's image should be.
set -eu

venv=${1:?usage: cpu-venv.sh VENV}
python=$venv/bin/python
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$python" "$(dirname "$0")/torchvision_cpu.py" "$site"
torch=$site/torch
[ -x "$torch/bin/torch_shm_manager" ] || {
    echo "cpu-venv.sh: error: $torch/bin/torch_shm_manager is missing: not the torch this was written for" >&2
    exit 1
}
rm -rf "$torch/test" "$torch/include"
find "$torch/bin" -maxdepth 1 -type f \( -name 'test_*' -o -name '*StoreTest' \) -exec rm -f {} +
echo "cpu-venv.sh: removed torch's C++ tests and headers"

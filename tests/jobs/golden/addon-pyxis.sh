#!/bin/bash
# Rendered by `ddpimg sbatch` for site generic (Any cluster: the launcher's first node is
# the master; NCCL/Gloo choose interfaces). 2 nodes x 4 GPUs = 8 ranks: srun starts one
# task per rank. Render it again rather than editing it: ddpimg checks the layout it
# writes.
#SBATCH --job-name=ddpimg
#SBATCH --nodes=2
# One task per GPU: each task is one rank, bound by ddpimg to the GPU of its local rank.
#SBATCH --ntasks-per-node=4
# GPUs requested the way site generic wants, and only that way.
#SBATCH --gres=gpu:4
# CPUs per rank, for its data-loading workers.
#SBATCH --cpus-per-task=8
#SBATCH --time=12:00:00
# The job id (%j, arrays %A_%a) stays the same when the job is requeued; append mode
# keeps the log of every restart in one file.
#SBATCH --output=%x-%j.out
#SBATCH --open-mode=append
# USR2 reaches this batch shell (B:) 300 s before the time limit; the trap below passes it
# to the training step, which checkpoints and exits 75; the script then requeues the job,
# which resumes from the checkpoint. It does the same when a rank was lost (exit 5).
#SBATCH --requeue
#SBATCH --signal=B:USR2@300

# No `set -e`: `wait` returns non-zero when a signal arrives, and the script must go
# on to pass the signal to the step and decide about the requeue.
set -uo pipefail

MAX_RESTARTS=3
# train's exit statuses (ddpimg.exitcodes): checkpointed on USR2 or TERM; a rank lost
# (stopped, hung, dead) and the others gave up on it; a failed script exits 1.
PREEMPTED=75
RANK_LOST=5

echo "ddpimg: job ${SLURM_JOB_ID}, restart ${SLURM_RESTART_COUNT:-0}, nodes ${SLURM_JOB_NODELIST}" >&2

step_pid=""
interrupted=0
cancelled=0
# shellcheck disable=SC2317  # runs on a signal, by the trap below
forward_usr2() {
    interrupted=1
    echo "ddpimg: USR2, time limit near: the training step checkpoints and stops" >&2
    # srun passes the signal on to every task of its step.
    if [ -n "$step_pid" ]; then kill -USR2 "$step_pid"; fi
}
# shellcheck disable=SC2317  # runs on a signal, by the trap below
note_term() {
    interrupted=1
    cancelled=1
    # Slurm signals the step itself when it cancels or preempts the job (and requeues
    # it itself if it preempted it): only keep waiting, so the checkpoint gets written.
    echo "ddpimg: TERM, job cancelled or preempted: waiting for the step" >&2
}
trap forward_usr2 USR2
trap note_term TERM

# Add-ons (ddpimg addon build): mounted read-only at /opt/ddpimg/addons/NAME, after
# the image's own packages. Their sha256, taken now, goes into every run's manifest.
DDPIMG_ADDONS=
sum=$(sha256sum < "${PWD}"/timm.addon.sqsh) || {
    printf 'ddpimg: add-on %s cannot be read\n' "${PWD}"/timm.addon.sqsh >&2
    exit 1
}
DDPIMG_ADDONS="${DDPIMG_ADDONS:+${DDPIMG_ADDONS},}timm=${sum%% *}"
export DDPIMG_ADDONS

# Each node unpacks the add-ons once onto its own disk (enroot cannot mount a squashfs file for a user, NVIDIA/enroot#180);
# the step binds them read-only, and they are removed after it.
export DDPIMG_ADDON_DIR="${TMPDIR:-/tmp}/ddpimg-addons-${SLURM_JOB_ID}"
# shellcheck disable=SC2016  # the quoted words are for the shell of each task
srun --nodes=2 --ntasks-per-node=1 --ntasks=2 bash -c 'command -v unsquashfs >/dev/null || { echo "ddpimg: unsquashfs (squashfs-tools) is not on $(hostname -s)" >&2; exit 1; }; rm -rf -- "$0" && mkdir -p -- "$0" && while [ "$#" -gt 1 ]; do unsquashfs -no-progress -no-xattrs -dest "$0/$1" "$2" >/dev/null || exit 1; shift 2; done' "${DDPIMG_ADDON_DIR}" timm "${PWD}"/timm.addon.sqsh || {
    echo 'ddpimg: unpacking the add-ons on the nodes failed' >&2
    exit 1
}

# The training step, in the background so that the traps above can run. srun is
# given --cpus-per-task again: since Slurm 22.05 it does not take it from the job.
# The single quotes keep the per-task variables for each task's own shell.
# pyxis starts each task in the enroot image (the srun options above), with the
# task's environment; enroot's NVIDIA hook makes the allocated GPUs visible.
# shellcheck disable=SC2016  # the quoted words are for the shell of each task
srun --nodes=2 --ntasks-per-node=4 --cpus-per-task=8 \
    --container-image=./ddpimg+gpu.sqsh --container-mounts="${PWD}:${PWD},${DDPIMG_ADDON_DIR}/timm:/opt/ddpimg/addons/timm:ro" --container-workdir="${PWD}" \
    bash -c 'echo "ddpimg: task ${SLURM_PROCID} (node ${SLURM_NODEID}, local ${SLURM_LOCALID}) on $(hostname -s)" >&2; exec "$@"' ddpimg-task \
    train --site generic --script train.py --lr 0.1 &
step_pid=$!

# A trapped signal ends `wait` early (status 128+signal) while the step still runs.
while :; do
    interrupted=0
    wait "$step_pid"
    status=$?
    if [ "$interrupted" -eq 0 ] || [ "$status" -le 128 ]; then
        break
    fi
done

# Remove the unpacked add-ons: node-local space is not this job's alone.
srun --nodes=2 --ntasks-per-node=1 --ntasks=2 rm -rf -- "${DDPIMG_ADDON_DIR}"

# A rank lost: the ranks that gave up on it exit RANK_LOST; srun reports 137 instead
# when the lost rank was killed (by its sentinel, the out-of-memory killer), and the
# run's manifest.json says so.
lost=0
if [ "$status" -eq "$RANK_LOST" ]; then lost=1; fi
if [ "$lost" -eq 1 ]; then
    echo "ddpimg: a rank was lost (status $status, the error above names it): the job goes on from its last checkpoint on the nodes Slurm gives it" >&2
fi

# Preempted (checkpoint written) or a rank lost: requeue, so the job resumes from its
# last checkpoint, at most MAX_RESTARTS times. An array task is requeued by its own
# id, <array job id>_<task id>.
if { [ "$status" -eq "$PREEMPTED" ] || [ "$lost" -eq 1 ]; } && [ "$cancelled" -eq 0 ]; then
    restarts=${SLURM_RESTART_COUNT:-0}
    if [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
        job="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
    else
        job="${SLURM_JOB_ID}"
    fi
    if [ "$restarts" -ge "$MAX_RESTARTS" ]; then
        echo "ddpimg: job $job was restarted $restarts times (at most $MAX_RESTARTS): not requeueing; resubmit it to go on from the checkpoint" >&2
    else
        echo "ddpimg: requeueing job $job (restart $((restarts + 1)) of $MAX_RESTARTS)" >&2
        scontrol requeue "$job" && exit 0
        echo "ddpimg: scontrol requeue $job failed; resubmit it to go on from the checkpoint" >&2
    fi
fi
echo "ddpimg: the training step ended with status $status" >&2
exit "$status"

#!/bin/bash
# Rendered by `ddpimg sbatch` for site roihu (CSC Roihu: 4 x GH200 (aarch64) per node,
# InfiniBand NDR, apptainer). 1 node x 4 GPUs = 4 ranks: srun starts one task per rank. A
# sweep of 3 points, each an array task with this layout. Render it again rather than
# editing it: ddpimg checks the layout it writes.
#SBATCH --job-name=ddpimg
#SBATCH --nodes=1
# One task per GPU: each task is one rank, bound by ddpimg to the GPU of its local rank.
#SBATCH --ntasks-per-node=4
# GPUs requested the way site roihu wants, and only that way.
#SBATCH --gres=gpu:gh200:4
# CPUs per rank, for its data-loading workers.
#SBATCH --cpus-per-task=72
#SBATCH --time=1:00:00
# gpularge: needs the project's access to gpularge: a 30-day trial requested in MyCSC,
# during which a scalability test must be submitted to CSC
#SBATCH --partition=gpularge
#SBATCH --array=0-2
# The job id (%j, arrays %A_%a) stays the same when the job is requeued; append mode
# keeps the log of every restart in one file.
#SBATCH --output=%x-%A_%a.out
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

# Sweep train-lr-921a5d: each array task trains one point, in a directory of its own
# under runs/train-lr-921a5d (sweep.json there lists every point); a task that is
# preempted is requeued alone and goes on in its own directory.
case "${SLURM_ARRAY_TASK_ID:-}" in
    0) out=runs/train-lr-921a5d/lr=0.004885; point=(--out "$out" --script train.py --lr 0.004885) ;;
    1) out=runs/train-lr-921a5d/lr=0.00328; point=(--out "$out" --script train.py --lr 0.00328) ;;
    2) out=runs/train-lr-921a5d/lr=0.0006937; point=(--out "$out" --script train.py --lr 0.0006937) ;;
    *) echo "ddpimg: array task ${SLURM_ARRAY_TASK_ID:-(none)} is not a point of sweep train-lr-921a5d" >&2; exit 2 ;;
esac
mkdir -p runs/train-lr-921a5d
if [ ! -e runs/train-lr-921a5d/sweep.json ]; then
    printf '%s\n' '{"axes": [{"high": 0.01, "low": 0.0001, "name": "lr", "range": "log"}], "command": ["--script", "train.py", "--lr", "{lr}"], "kind": "ddpimg-sweep", "name": "train-lr-921a5d", "points": [{"index": 0, "name": "lr=0.004885", "values": {"lr": "0.004885"}}, {"index": 1, "name": "lr=0.00328", "values": {"lr": "0.00328"}}, {"index": 2, "name": "lr=0.0006937", "values": {"lr": "0.0006937"}}], "seed": 0, "trials": 3, "version": 1}' > runs/train-lr-921a5d/sweep.json."$SLURM_JOB_ID" &&
        mv -f runs/train-lr-921a5d/sweep.json."$SLURM_JOB_ID" runs/train-lr-921a5d/sweep.json
fi

# The training step, in the background so that the traps above can run. srun is
# given --cpus-per-task again: since Slurm 22.05 it does not take it from the job.
# The single quotes keep the per-task variables for each task's own shell.
# --cpu-bind: site roihu's binding of each task's cores.
# apptainer passes the host environment (SLURM_*) into the container; the working
# directory and $HOME are bound by default, --bind adds the site's file systems.
# --nv makes the host's GPU driver visible inside.
# shellcheck disable=SC2016  # the quoted words are for the shell of each task
srun --nodes=1 --ntasks-per-node=4 --cpus-per-task=72 \
    --cpu-bind=cores \
    bash -c 'echo "ddpimg: task ${SLURM_PROCID} (node ${SLURM_NODEID}, local ${SLURM_LOCALID}) on $(hostname -s)" >&2; exec "$@"' ddpimg-task \
    apptainer exec --nv --bind /users,/projappl,/scratch,/dataset ddp-arm64.sif \
    train --site roihu "${point[@]}" &
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

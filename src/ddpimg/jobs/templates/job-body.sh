# No `set -e`: `wait` returns non-zero when a signal arrives, and the script must go
# on to pass the signal to the step and decide about the requeue.
set -uo pipefail

MAX_RESTARTS=@MAX_RESTARTS@
# train's exit statuses (ddpimg.exitcodes): checkpointed on USR2 or TERM; a rank lost
# (stopped, hung, dead) and the others gave up on it; a failed script exits 1.
PREEMPTED=@PREEMPTED@
RANK_LOST=@RANK_LOST@

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

@STEP@
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

@CLEANUP@
# A rank lost: the ranks that gave up on it exit RANK_LOST; srun reports 137 instead
# when the lost rank was killed (by its sentinel, the out-of-memory killer), and the
# run's manifest.json says so.
lost=0
if [ "$status" -eq "$RANK_LOST" ]; then lost=1; fi
@LOST_FROM_MANIFEST@
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

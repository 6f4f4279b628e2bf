"""The Job's story (docs/architecture.md#job-flow), as ordered steps, one file each. Read them in this order:

1. ``admit.py``      may it run? refusals before any spend (no Trigger, a refused Trigger,
                     ``sessions-dir-unset``, ``config-refused``) and their comment (``comment.py``);
                     then it waits for a slot, first come first served (the dispatcher's queue);
2. ``key.py``        which conversation it continues: an issue's branch, a PR's head from the forge API;
3. ``stage.py``      the gates judge the key and stage the Job's own copy (the store does the work);
4. ``pod.py``        the forge token and the job Pod; ``start.py`` runs 2–4 in a free slot, idempotently;
5. ``complete.py``   the Pod ended: promote at most once (the store's journal), merge the record;
6. ``sessionkey.py`` the SessionKey of the key: created with the Pod, status at the job's end, and
                     forgetting the key when it is deleted;
7. ``timers.py``     what time changes: ``Resumable`` refresh, the reaper, the staging sweep.

A Job, its Trigger and a SessionKey travel through the steps as the frozen views of ``api/views.py``
(typed spec and status, parsed once where the dispatcher receives or reads them); a job Pod stays a dict.
``summarize.py`` is the one writer of a Job's phase and conditions: every step returns a typed change
and ``summarize`` turns it into the status patch; a SessionKey's steps (its end, quarantine, retirement, cost)
return outcomes that ``summarize_sessionkey.py`` folds and ``sessionkey.write`` writes, and a Trigger's
(its reading, the cron loop) ``summarize_trigger.py`` and ``trigger.write_status``; ``status_patch.py`` is the
one patch helper under all three (docs/architecture.md#status-writing). ``table.py`` holds one record per
Job (its uid, phase, place in line, ...); ``queue.py`` the line for a slot; ``refused.py`` what a refusal
writes.
``dispatcher.py`` routes the events of the operator's one queue to the steps, each Job's in that Job's key, and
runs the loops (``loops.py``), which hand a Job's work to its key (``handoff.py``); ``handlers/`` only queue the
events. The steps stand in layers (``.importlinter``): a step may use the
ones below it, never its siblings. Nothing here builds a path inside the store or touches a store file: ``store/``
keeps its own knowledge (staging, the promotion journal, forgetting).
"""

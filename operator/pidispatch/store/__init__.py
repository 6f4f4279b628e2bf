"""The session store on a filesystem: keys, the gate ladder, staging, promotion, the lock, the reaper.

Knows nothing of Kubernetes. Its public functions never raise into their caller: a fault becomes a
reason plus a ``session_store_failed`` log line, because a job must never fail for want of history.
"""

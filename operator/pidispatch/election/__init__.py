"""One replica acts, the others stand by (docs/architecture.md#leadership): leader election on a Lease
(``leader.py``), the fence that stops a replica that may have lost it before its next write (``fence.py``), and
the list+watch of the Jobs that only the leader runs (``watch.py``). kopf's side of it is ``handlers/leadership.py``.
"""

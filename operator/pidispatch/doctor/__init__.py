"""``pidispatch doctor`` (docs/cli.md#pidispatch-doctor): pure checks over plain data, and the edge that gathers it.

``diagnose.py`` the session, auth and model checks and the whole report; ``check.py`` one line of the report
and its printing; ``cluster.py`` the Kubernetes checks; ``gateway.py`` the gateway's line; ``edge.py`` reads
the filesystem, the cluster and the gateway and runs the command. Only ``edge.py`` does I/O (``.importlinter``).
"""

"""Staging without a shared volume (``sessions.staging.mode: transfer``, issue 33 item 2).

A job Pod mounts no claim: its runner fetches the Job's staged copy from the operator over in-cluster
HTTPS before pi starts and hands the result back before it exits; the operator writes it where the
mount would have put it (``<staging>/<uid>/session/``) and promotes exactly as in ``mount`` mode.

* ``protocol``: the URLs, headers and environment both sides agree on (standard library only);
* ``archive``: the body's format, one reader and one writer for both sides (standard library only);
* ``token``: the per-job credential, bound to the Job's uid;
* ``server``: the operator's side (aiohttp, TLS only);
* ``client``: the runner's side (standard library only: the runner's image carries no aiohttp).

This package imports nothing at import time, so the runner's ``client`` pulls in no server dependency.
"""

"""Intake without an inbound webhook: the receiver reads the events Triggers need from the forge's REST API.

``ratelimit.py`` (how long to wait, from the forge's headers), ``cursor.py`` (what was already read, kept in a
ConfigMap), ``translate.py`` (a REST object as the webhook payload of the same event), ``forge.py`` (conditional
GETs with ``If-None-Match``), ``poller.py`` (one pass over the served repositories, through ``receiver/intake.py``,
the webhook's own decision path), ``run.py`` (the loop in the receiver's process).
docs/triggers.md#polling-instead-of-a-webhook.
"""

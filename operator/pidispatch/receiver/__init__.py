"""The webhook receiver (docs/architecture.md#components): GitHub deliveries in, Job CRs out.

It verifies ``X-Hub-Signature-256`` before it parses anything, matches the delivery against the
Trigger CRs of its namespace and creates one Job per matching Trigger under a name derived from
``X-GitHub-Delivery``, so a redelivery is a 409 and never a second job. It never sees the store and
its ServiceAccount may only read Triggers and create Jobs.

Layout: ``settings`` (env → typed settings), ``signature`` (HMAC check), ``delivery`` (the pure core:
payload → event facts → matching Triggers → Job bodies and names), ``cluster`` (the two API calls it
makes), ``app`` (the aiohttp shell), ``main`` (``pidispatch receiver``).
"""

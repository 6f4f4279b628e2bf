"""The gateway: a job's only way out (docs/gateway.md).

Job Pods hold no model key and no forge token. They hold a capability (``capability.py``) that the
gateway checks, and the gateway, not the job, adds the real credential on the way to the model provider
or the forge, counts the provider's own token figures, and lets nothing else out but CONNECT to the hosts
the job's claims allow.
"""

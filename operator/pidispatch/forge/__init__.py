"""GitHub, as the operator talks to it: pull-request head lookup, refusal comments, job credentials.

* ``head``        pure: a pull request's head as the API reports it, and why it gives no key;
* ``comments``    pure: the refusal comments (our words) and the per-delivery marker;
* ``credentials`` pure: which token a job Pod gets (minted, an existing Secret, none);
* ``appauth``     the GitHub App's RS256 JWT (``cryptography``) and its installation tokens;
* ``github``      the REST client (urllib3) and :class:`~pidispatch.forge.github.Forge`, the one object
                  the controller calls.

Tokens never leave these objects except into the per-job Secret: no log line, exception message,
status field, Event or metric carries one.
"""

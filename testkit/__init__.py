"""What the unit tests (``tests/``) and the control-plane tests (``e2e/``) share: the fakes and the helpers.

pytest finds this package through ``pythonpath`` in ``pyproject.toml`` (the repository root); no test edits
``sys.path``, and no test module imports another: what two test files share lives here.

The fakes, each speaking the real thing's wire format:

* ``fakegithub`` -- signed webhook deliveries, as GitHub sends them;
* ``fakegithub_api`` -- GitHub's REST API (Apps, installation tokens, issues, pulls), with
  ``gitforge`` behind it serving real git over smart HTTP and ``fakegithub_graphql`` answering what ``gh``
  asks by GraphQL; ``forge_server`` runs both as a process (the demo). Both fakes build GitHub's JSON objects
  from ``github_objects`` and are held to GitHub's published descriptions (``github_contract``: the REST
  API; ``webhook_contract``: webhook payloads; ``contracts`` and ``contract_fixture``: the record of
  mismatches and the fixture that fails a test for one; docs/github-contracts.md);
* ``scripted_model`` -- an OpenAI-compatible model with scripted replies, tool calls, usage and errors;
* ``fakepi`` -- the scripted stand-in the job Pods of the e2e tests run instead of pi;
* ``memoryapi`` -- ``MemoryApi``, the one in-memory API server, a ``pidispatch.kubeapi.KubeApi``.

The helpers: ``wait`` (``wait_until``, the one way a test waits), ``pitool`` (the pinned real pi),
``runner`` (``pidispatch runner`` as a process with real pi), ``jobflow`` (the dispatcher driven by hand),
``receiver`` (the webhook receiver served in-process), ``chart`` (``helm template`` and its readers),
``store`` and ``seams`` (a store on a real filesystem, races at its seams), ``workspace`` (a served forge and
the job's git environment), ``transcripts`` and ``compaction`` (pi's real session files, gate 12's
reference), ``mentions`` (the mention rule's cases), ``env`` (an environment that finds no cluster).
"""

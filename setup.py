"""The one C module (the compaction pre-filter's search); everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds and
`pidispatch.transcript.compaction` falls back to the pure-Python search (same answers, about four
times slower staging of large transcripts; `pidispatch doctor` says which one is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pidispatch.transcript._needles",
            ["operator/pidispatch/transcript/_needles.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)

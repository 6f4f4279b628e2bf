"""The autouse fixture that fails a test during which the fake forge met a GitHub contract mismatch.

``tests/conftest.py`` and ``e2e/conftest.py`` import it, so it runs for every test; the fake answers a
mismatch with a 500 and records it (``testkit/contracts.py``), and this fixture reads the record after the
test, so whatever the code under test made of the 500 the test fails (docs/github-contracts.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.contracts import recorded, take


@pytest.fixture(autouse=True)
def github_contracts_kept() -> Iterator[None]:
    """Fail the test if the fake forge met a request or gave an answer GitHub's description does not allow."""
    before = recorded()
    yield
    new = [e for e in recorded() if not any(e is b for b in before)]
    if new:
        take(new)  # reported here, once: the next test starts clean
        lines = "\n".join(f"  - {e}" for e in new[:20])
        more = f"\n  ... and {len(new) - 20} more" if len(new) > 20 else ""
        pytest.fail(f"{len(new)} GitHub contract mismatch(es) during this test (docs/github-contracts.md):\n"
                    f"{lines}{more}", pytrace=False)

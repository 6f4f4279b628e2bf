"""Staging by transfer inside the job Pod (``sessions.staging.mode: transfer``, issue 33 item 2).

Before pi starts the runner fetches the Job's staged copy into the session directory, exactly where the
claim's subPath would have put it in ``mount`` mode (``/session``, an emptyDir here), so everything after
(the mount checks, ``session.py``, pi, the pack turn) is the same in both modes. After pi succeeded it
hands the directory's allowed files back; the operator promotes only a committed upload. Standard library
only (``transfer/client.py``): the job image carries no aiohttp.
"""

from __future__ import annotations

import os
import time

from pidispatch.events import emit
from pidispatch.runner.config import Transfer
from pidispatch.transfer import client


class TransferFailed(Exception):
    """The staged copy could not be fetched, or the result handed back; ``final``: the operator refused it."""

    def __init__(self, message: str, final: bool) -> None:
        super().__init__(message)
        self.final = final


def fetch_staged(transfer: Transfer, session_dir: str) -> None:
    """Fill ``session_dir`` (created if missing) with the Job's staged copy; raise :class:`TransferFailed`."""
    began = time.monotonic()
    try:
        os.makedirs(session_dir, mode=0o700, exist_ok=True)
        fetched = client.fetch(transfer.url, transfer.token, transfer.ca_file, session_dir,
                               max_bytes=transfer.max_bytes)
    except client.TransferRefused as error:
        raise TransferFailed(f"the staged session could not be fetched: {error}", final=True) from None
    except (client.TransferError, OSError) as error:
        raise TransferFailed(f"the staged session could not be fetched from the operator: {error}",
                             final=False) from None
    emit("transfer_fetched", bytes=fetched.bytes, files=[name for name, _ in fetched.files],
         seconds=round(time.monotonic() - began, 3))


def hand_back(transfer: Transfer, session_dir: str) -> None:
    """Upload ``session_dir``'s allowed files to the operator; raise :class:`TransferFailed` when it did not
    commit them (the Job then fails: nothing is promoted)."""
    began = time.monotonic()
    try:
        uploaded = client.upload(transfer.url, transfer.token, transfer.ca_file, session_dir,
                                 max_bytes=transfer.max_bytes)
    except client.TransferRefused as error:
        raise TransferFailed(f"the session could not be handed back: {error}", final=True) from None
    except (client.TransferError, OSError) as error:
        raise TransferFailed(f"the session could not be handed back to the operator: {error}",
                             final=False) from None
    emit("transfer_uploaded", bytes=uploaded.bytes, files=list(uploaded.files), skipped=list(uploaded.skipped),
         seconds=round(time.monotonic() - began, 3))

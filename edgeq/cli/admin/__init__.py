"""``edgeq admin``: administer devices from the home server, by signed admin messages.

    edgeq admin keygen --out operator.key                               # the operator's key pair
    edgeq admin --db home.db --key operator.key DEV1 queue list --wait 30s
    edgeq admin --db home.db --key operator.key --all-devices queue depth ORDERS --wait 30s
    edgeq admin --db home.db pending                                     # no reply yet

A request is signed, recorded in the home store and queued for the device's next sync
(:class:`edgeq.sync.server.admin.client.AdminClient`); ``--wait`` waits for the replies, otherwise the
request ids are printed. The commands after the device name (``queue``, ``purge``,
``sweep``, ``rules``, ``sync-status``) are the device's, run there; ``keygen``,
``pending``, ``replies`` and ``show`` are the operator's own. See docs/admin.md.
"""

from edgeq.cli.admin import device, operator
from edgeq.cli.admin.group import admin

__all__ = ["admin", "device", "operator"]

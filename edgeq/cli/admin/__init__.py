"""``edgeq admin``: administer devices from the home server by signed admin messages (docs/admin.md)."""

from edgeq.cli.admin import device, operator
from edgeq.cli.admin.group import admin

__all__ = ["admin", "device", "operator"]

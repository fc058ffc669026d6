"""``edgeq check``: finding damage in a store (one scan), reading what surrounds the messages,
and the report."""

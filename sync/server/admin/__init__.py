"""Remote administration on the home server: the operator's client, and its record of requests
and replies."""

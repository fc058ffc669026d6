"""The home server: the ASGI app, its routes and middleware, the protocol's logic and what it remembers."""

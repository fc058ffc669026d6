"""The operator console: pages over the home server's store, its sign-in and its sessions."""

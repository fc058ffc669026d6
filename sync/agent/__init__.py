"""The device side of sync: the agent, its link to the home server, push, pull, the daemon and its status."""

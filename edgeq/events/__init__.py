"""Queue events: the sink that records them, the dispatcher that delivers them, rule bindings."""
